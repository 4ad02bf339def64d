"""Local prompt counting: a word-level tokenizer built here, so every count is known by hand."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tokenizers")

from tokenizers import Tokenizer, models, pre_tokenizers

from llm_locust.client.workload.counting import LocalCounter, OffsetCounter, local_counter
from llm_locust.client.workload.synthetic import SyntheticPrompts, calibrate

TEMPLATE = (
    "{{ bos_token }} {% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant :{% endif %}"
)


@pytest.fixture
def model_dir(tmp_path):
    """A folder with a word-level tokenizer (one token per whitespace-separated word) and a chat
    template that adds ``<s> user : … </s> assistant :`` = 6 tokens around the content."""
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "the": 1, "of": 2}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": {"content": "</s>"}, "chat_template": TEMPLATE}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path


def test_chat_count_renders_the_template_around_the_content(model_dir):
    counter = LocalCounter(model_dir, chat=True)
    assert counter.has_template
    assert counter("one two three") == 3 + 6
    assert LocalCounter(model_dir, chat=False)("one two three") == 3


def test_chat_template_from_chat_template_jinja_wins(model_dir):
    (model_dir / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }}{% endfor %} END")
    assert LocalCounter(model_dir, chat=True)("a b") == 3


def test_without_a_template_the_server_measures_it_once(model_dir, tmp_path):
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "tokenizer.json").write_bytes((model_dir / "tokenizer.json").read_bytes())
    probes = []

    def server_count(content: str) -> int:  # the server's template adds 11 tokens
        probes.append(content)
        return len(content.split()) + 11

    counter = local_counter(str(lone / "tokenizer.json"), protocol="openai-chat", server=lambda: server_count,
                            probe_content="Words:")  # fmt: skip
    assert isinstance(counter, OffsetCounter)
    assert counter("a b c d") == 4 + 11
    assert probes == ["Words:"]


def test_prompts_sized_by_the_tokenizer_count_exactly(model_dir):
    counter = LocalCounter(model_dir, chat=True)
    calibration = calibrate(counter, method="tokenizer")
    source = SyntheticPrompts(calibration, input_tokens=128, stddev_tokens=16, seed=2)
    for _ in range(20):
        item = source.next_request()
        assert counter(item.prompt) == item.prompt_tokens_target
        assert len(item.prompt.split()) + 6 == item.prompt_tokens_target


@pytest.fixture
def usage_server():
    """A loopback HTTP server answering every POST with the next canned (status, JSON body); the
    request bodies it received are kept."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    answers, received = [], []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append((self.path, json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
            status, body = answers.pop(0)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", answers, received
    server.shutdown()


def test_server_counter_reads_usage_prompt_tokens_of_a_one_token_probe(usage_server):
    from llm_locust.client.workload.counting import CountError, ServerCounter

    url, answers, received = usage_server
    answers += [(200, {"usage": {"prompt_tokens": 42, "completion_tokens": 1}}), (200, {"choices": []}),
                (400, {"error": {"message": "too long"}})]  # fmt: skip
    counter = ServerCounter(host=url, protocol="openai-chat", model="m")

    assert counter("a b") == 42
    path, body = received[0]
    assert path == "/v1/chat/completions"
    assert body["max_tokens"] == 1 and body["stream"] is False
    assert body["messages"] == [{"role": "user", "content": "a b"}]
    with pytest.raises(CountError, match="answered 200"):
        counter("a b")
    with pytest.raises(CountError, match="answered 400 .*too long.*give --tokenizer"):
        counter("a b")


def test_tgi_cannot_be_sized_by_the_server():
    from llm_locust.client.workload.counting import ServerCounter

    with pytest.raises(ValueError, match="--protocol tgi reports no prompt token count .* give --tokenizer"):
        ServerCounter(host="http://127.0.0.1:9", protocol="tgi", model="m")
