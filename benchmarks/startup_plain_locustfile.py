"""Plain Locust, no llm-locust: the yardstick of ``benchmarks/startup.py``.

One ``HttpUser`` streams chat completions from the embedded server and reads each stream to its
end, as a hand-written Locust test of an LLM server would. Nothing of ``llm_locust`` is imported.

    locust -f benchmarks/startup_plain_locustfile.py --headless --host http://127.0.0.1:8000 -u 1 -t 5s
"""

from locust import HttpUser, constant, task

BODY = {
    "model": "sim-llama",
    "messages": [{"role": "user", "content": "Say something."}],
    "max_tokens": 64,
    "stream": True,
}


class PlainChatUser(HttpUser):
    wait_time = constant(0)

    @task
    def chat(self) -> None:
        response = self.client.post("/v1/chat/completions", json=BODY, stream=True, name="chat")
        for _ in response.iter_lines():
            pass
        response.close()
