"""``llm-locust run`` refuses, before any load, a host that is not an http(s) URL and a server whose
/v1/models answer names no model when none was given (issue 14): one line, exit 2, nothing sent
but the GET (checked on a scripted loopback server's own log)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llm_locust.cli import main
from llm_locust.client.models import host_problem
from tests.conftest import REPO, server_log, stop
from tests.scripted_server import sse_script

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)


def json_answer(body: str, status: str = "200 OK") -> dict:
    return sse_script([(0.0, body)], status=status, framing="length", content_type="application/json")


@pytest.mark.parametrize(
    "body",
    [
        "<html><body>It works!</body></html>",
        "{}",
        '{"object": "list", "data": []}',
        '{"data": {"id": "m"}}',
        '{"data": [{"name": "m"}]}',
        '{"data": [{"id": 5}]}',
        '{"data": [{"id": ""}]}',
    ],
)
def test_junk_models_answer_without_model_is_refused_before_any_load(scripted_server, tmp_path, capsys, body):
    url, server = scripted_server(json_answer(body))
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as exited:
        main(["run", "--host", url, "--out", str(run_dir)])
    stop(server)
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"llm-locust run: error: {url}: cannot tell the model: GET /v1/models answered 200 ")
    assert err.endswith("pass --model") and "\n" not in err
    assert server_log(server)["requests"] == ["GET /v1/models HTTP/1.1"]
    assert not run_dir.exists()


def test_with_model_given_a_junk_models_answer_says_nothing(scripted_server):
    # "warning: GET /v1/models answered 404 ...; pass --model" was printed although --model was given
    from llm_locust.client.models import preflight

    url, server = scripted_server(json_answer("not json"))
    error, note = preflight(url, model="m")
    stop(server)
    assert (error, note) == (None, "")


def test_without_model_a_junk_models_answer_is_a_warning_when_no_model_is_needed(scripted_server):
    from llm_locust.client.models import preflight

    url, server = scripted_server(json_answer("not json"))
    error, note = preflight(url, model_required=False)
    stop(server)
    assert error is None and note.startswith("warning: GET /v1/models answered 200 'not json'")


def test_without_model_a_payload_file_run_needs_no_models_list(scripted_server):
    from llm_locust.client.models import preflight

    url, server = scripted_server(json_answer("Not Found", status="404 Not Found"))
    error, note = preflight(url, model_required=False)
    stop(server)
    assert error is None and "404" in note


def test_a_served_model_list_is_accepted(scripted_server):
    from llm_locust.client.models import preflight

    url, server = scripted_server(json_answer(json.dumps({"object": "list", "data": [{"id": "m1"}, {"id": "m2"}]})))
    assert preflight(url) == (None, "")
    stop(server)


def test_host_without_scheme_is_refused_before_any_connection(scripted_server, tmp_path, capsys):
    url, server = scripted_server(json_answer('{"data": [{"id": "m"}]}'))
    bare = url.removeprefix("http://")
    with pytest.raises(SystemExit) as exited:
        main(["run", "--host", bare, "--out", str(tmp_path / "run")])
    stop(server)
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == f"llm-locust run: error: --host {bare} has no http:// or https:// in front: use --host http://{bare}"
    assert server_log(server)["connections"] == 0


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        (
            "localhost:8000",
            "--host localhost:8000 has no http:// or https:// in front: use --host http://localhost:8000",
        ),
        ("ftp://127.0.0.1:21", "--host ftp://127.0.0.1:21: only http:// and https:// servers can be tested"),
        ("http://", "--host http://: only http:// and https:// servers can be tested"),
        ("http://127.0.0.1:80x", "--host http://127.0.0.1:80x is not a URL"),
        ("http://127.0.0.1:8000/v1/", "--host http://127.0.0.1:8000/v1/ ends with /v1: drop it"),
        ("http://127.0.0.1:8000", None),
        ("https://example.invalid/prefix/", None),
    ],
)
def test_host_problem(host, expected):
    problem = host_problem(host)
    if expected is None:
        assert problem is None
    else:
        assert problem.startswith(expected)


def test_plain_locust_with_a_bare_host_exits_2_with_one_line(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(REPO / "llm_locust" / "locustfiles" / "chat_stream.py"), "--headless",
         "--host", "127.0.0.1:9", "-u", "1", "-t", "2s"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 2
    assert "invalid option: --host 127.0.0.1:9 has no http://" in out.stderr
    assert "Traceback" not in out.stderr
