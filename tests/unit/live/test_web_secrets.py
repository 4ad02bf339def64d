"""The API key never reaches the web UI (issue 14: it was in Locust's page as
``extra_options.api_key.default_value``), given on the command line or through
``LLM_LOCUST_API_KEY``; and with llm-locust loaded the UI binds 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import sys

import pytest
from locust.argument_parser import get_parser

import llm_locust.plugin  # noqa: F401  (Locust's global parser, which the index page re-parses, knows our options)
from llm_locust.options import WEB_HOST_DEFAULT
from tests.unit.live.test_live_web import fire, make_environment

SECRET = "sk-webui-7f3c9e21d0b84a56"


def every_get_route(app) -> list[str]:
    """Every GET route of the Flask app without URL arguments, and the LLM tab's static files."""
    paths = sorted(rule.rule for rule in app.url_map.iter_rules() if "GET" in rule.methods and not rule.arguments)
    return paths + ["/llm/static/llm_live.js", "/llm/static/llm_live.css"]


@pytest.mark.parametrize("given", ["argv", "env"])
def test_the_api_key_is_in_no_page_and_no_route(tmp_path, monkeypatch, given):
    run_dir = tmp_path / "run"
    if given == "env":
        monkeypatch.setenv("LLM_LOCUST_API_KEY", SECRET)
        key_args: tuple[str, ...] = ()
    else:
        key_args = ("--api-key", SECRET)
    # Locust's index page parses sys.argv for its form's extra options
    monkeypatch.setattr(sys, "argv", ["locust", "-f", "x.py", "--model", "m", *key_args])
    environment = make_environment(tmp_path, "--run-dir", str(run_dir), "--model", "m", *key_args)
    assert environment.parsed_options.api_key == SECRET  # the run has the key...
    client = environment.web_ui.app.test_client()
    environment.events.test_start.fire(environment=environment)
    for i in range(3):
        fire(environment, environment.llm_live.records.t0_s + i, error_kind="http_429" if i == 1 else "")
    environment.runner.stats.log_error("POST", "chat", RuntimeError("http_429: busy"))

    paths = every_get_route(environment.web_ui.app)
    for path in (
        "/",
        "/llm/",
        "/llm/data",
        "/llm/stats.csv",
        "/llm/series.csv",
        "/llm/steps.csv",
        "/llm/requests.csv",
        "/stats/requests",
        "/stats/report",
        "/stats/failures/csv",
    ):
        assert path in paths, paths
    served = {}
    for path in paths:
        response = client.get(path)
        served[path] = response.status_code
        assert SECRET.encode() not in response.get_data(), path  # ...and no page shows it
    assert served["/"] == served["/llm/"] == served["/llm/data"] == served["/llm/requests.csv"] == 200
    page = client.get("/").get_data(as_text=True)
    assert '"extra_options"' in page and '"max_tokens"' in page  # the form still offers the other options
    assert '"api_key"' not in page


def test_the_web_ui_binds_loopback_unless_told(monkeypatch):
    monkeypatch.delenv("LOCUST_WEB_HOST", raising=False)
    parser = get_parser()
    assert parser.parse_args(["-f", "x.py"]).web_host == WEB_HOST_DEFAULT == "127.0.0.1"
    assert parser.parse_args(["-f", "x.py", "--web-host", "0.0.0.0"]).web_host == "0.0.0.0"
    monkeypatch.setenv("LOCUST_WEB_HOST", "*")
    assert get_parser().parse_args(["-f", "x.py"]).web_host == "*"
