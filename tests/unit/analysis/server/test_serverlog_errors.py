"""Error lines by kind (llm_locust/analysis/server/serverlog/errors.py), from lines the engines really write."""

import pytest

from llm_locust.analysis.server.serverlog import LogText
from llm_locust.analysis.server.serverlog.errors import count_by_kind, scan_errors

LINES = [
    # vLLM 0.32 (vllm/v1/engine/async_llm.py "Aborted request %s."; uvicorn access log)
    "(APIServer pid=1) INFO 11-30 12:23:03 [async_llm.py:402] Aborted request chatcmpl-123.",
    'INFO:     127.0.0.1:54924 - "POST /v1/chat/completions HTTP/1.1" 429 Too Many Requests',
    # torch on a GPU
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    # TGI (router/src/infer/mod.rs InferError::Overloaded, "Model is overloaded")
    "2024-05-07T12:39:22.141566Z ERROR compat_generate:generate_stream: "
    "text_generation_router::infer: router/src/infer/mod.rs:76: Model is overloaded",
    # llama.cpp (tools/server/server-context.cpp SRV_WRN "cancel task, id_task = %d")
    "0.19.186.682 W srv          stop: cancel task, id_task = 865",
    "ERROR:    Exception in ASGI application: ConnectionResetError: [Errno 104] Connection reset by peer",
    "WARNING 11-30 12:00:00 [engine.py:1] request req-7 timed out after 600 s",
    "INFO 11-30 12:00:00 [serving.py:1] keep_alive_timeout=5, timeout: 30",  # settings, no error
    "INFO 11-30 12:00:00 [scheduler.py:1] rejected 3 requests: prompt too long",
]


def test_each_kind_from_real_lines():
    errors = scan_errors(LogText.from_text("\n".join(LINES)))
    assert errors[["line", "kind"]].values.tolist() == [
        [1, "dropped"],
        [2, "rejected"],
        [3, "out_of_memory"],
        [4, "queue_full"],
        [5, "dropped"],
        [6, "connection_reset"],
        [7, "timeout"],
        [9, "rejected"],
    ]
    assert count_by_kind(errors) == {
        "out_of_memory": 1,
        "queue_full": 1,
        "connection_reset": 1,
        "timeout": 1,
        "rejected": 2,
        "dropped": 2,
    }


def test_user_patterns_come_first_and_may_add_kinds():
    text = "2025-01-01 00:00:00 scheduler: shed 4 requests (overload)\n" + LINES[2]
    errors = scan_errors(
        LogText.from_text(text), extra=(("load_shed", r"shed \d+ requests"), ("gpu_fault", r"CUDA out of memory"))
    )
    assert errors["kind"].tolist() == ["load_shed", "gpu_fault"]


def test_a_bad_user_pattern_is_an_error():
    with pytest.raises(Exception, match="unterminated|missing"):
        scan_errors(LogText.from_text("x"), extra=(("k", "(oops"),))
