"""The LLM tab's routes on Locust's real Flask app (in-process, Flask's test client, no browser)."""

from __future__ import annotations

import csv
import io
import json
import sys

import pytest
from flask import Blueprint
from flask_login import UserMixin, login_user
from locust.argument_parser import get_parser
from locust.env import Environment
from locust.event import Events

from llm_locust.client.record import RequestRecord
from llm_locust.client.user import LLMUser
from llm_locust.live.web import INJECT, TAB_KEY
from llm_locust.master.recorder import install

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)


class ChatUser(LLMUser):
    host = "http://127.0.0.1:9"


@pytest.fixture(autouse=True)
def locust_argv(monkeypatch):
    """Locust's index page parses sys.argv for its extra options: give it a Locust command line."""
    monkeypatch.setattr(sys, "argv", ["locust", "-f", "x.py"])


def make_environment(tmp_path, *args: str, web_login: bool = False) -> Environment:
    """A standalone Locust environment with llm-locust installed on its own event bus and a web UI
    (not started: the test client calls the Flask app directly)."""
    events = Events()
    install(events)
    parser = get_parser()
    events.init_command_line_parser.fire(parser=parser)
    options = parser.parse_args(["-f", "x.py", "--host", ChatUser.host, "--metrics-url", "none", *args])
    environment = Environment(user_classes=[ChatUser], host=ChatUser.host, parsed_options=options, events=events)
    runner = environment.create_local_runner()
    web_ui = environment.create_web_ui("127.0.0.1", 0, web_login=web_login, delayed_start=True)
    events.init.fire(environment=environment, runner=runner, web_ui=web_ui)
    return environment


def fire(environment, t_start_s: float, *, error_kind: str = "", ttft_ms: float = 50.0) -> None:
    """One request event as LLMUser fires it: the record rides in the context."""
    record = RequestRecord(request_id=str(t_start_s), worker_id="local", name="chat", t_start_s=t_start_s,
                           ttft_ms=ttft_ms, e2e_ms=500.0, output_tokens=16, error_kind=error_kind)  # fmt: skip
    environment.events.request.fire(
        request_type="POST", name="chat", response_time=500.0, response_length=100,
        exception=RuntimeError(error_kind) if error_kind else None, context={"llm_record": record},
    )  # fmt: skip


def test_the_tab_its_table_and_locusts_counts_come_from_one_response(tmp_path):
    environment = make_environment(tmp_path)
    client = environment.web_ui.app.test_client()
    environment.events.test_start.fire(environment=environment)
    for i in range(7):
        fire(environment, 1000.0 + i, error_kind="http_429" if i == 3 else "")

    page = client.get("/").get_data(as_text=True)
    stats = client.get("/stats/requests").get_json()

    assert INJECT in page and '"extended_tabs"' in page and '"llm"' in page
    locust_chat = next(s for s in stats["stats"] if s["name"] == "chat")
    (extended,) = [e for e in stats["extended_stats"] if e["key"] == TAB_KEY]
    llm_chat = next(r for r in extended["data"] if r["name"] == "chat")
    assert llm_chat["requests"] == locust_chat["num_requests"] == 7
    assert llm_chat["failures"] == locust_chat["num_failures"] == 1
    assert llm_chat["failures_by_kind"] == "http_429: 1"
    assert llm_chat["ttft_p50_ms"] == 50.0


def test_memoized_stats_response_is_extended_once(tmp_path):
    # Locust caches /stats/requests for ~2 s: the LLM rows must stay those of the cached instant
    environment = make_environment(tmp_path)
    client = environment.web_ui.app.test_client()
    environment.events.test_start.fire(environment=environment)
    fire(environment, 1000.0)
    first = client.get("/stats/requests").get_json()
    fire(environment, 1001.0)
    second = client.get("/stats/requests").get_json()

    assert second == first
    assert second["extended_stats"][0]["data"][0]["requests"] == 1


def test_reset_stats_resets_the_llm_table_with_locusts(tmp_path):
    environment = make_environment(tmp_path)
    client = environment.web_ui.app.test_client()
    environment.events.test_start.fire(environment=environment)
    for i in range(3):
        fire(environment, 1000.0 + i)
    environment.llm_live.table()  # a cached table must not outlive the reset
    assert client.post("/stats/reset").status_code == 200
    for i in range(2):
        fire(environment, 1010.0 + i)

    stats = client.get("/stats/requests").get_json()

    locust_chat = next(s for s in stats["stats"] if s["name"] == "chat")
    llm_chat = next(r for r in stats["extended_stats"][0]["data"] if r["name"] == "chat")
    assert llm_chat["requests"] == locust_chat["num_requests"] == 2


def test_data_route_and_csv_downloads(tmp_path):
    run_dir = tmp_path / "run"
    environment = make_environment(tmp_path, "--run-dir", str(run_dir))
    client = environment.web_ui.app.test_client()
    environment.events.test_start.fire(environment=environment)
    for i in range(3):
        fire(environment, environment.llm_live.records.t0_s + i)

    data = json.loads(client.get("/llm/data").get_data(as_text=True))
    stats_csv = list(csv.DictReader(io.StringIO(client.get("/llm/stats.csv").get_data(as_text=True))))
    series_csv = client.get("/llm/series.csv")
    steps_csv = client.get("/llm/steps.csv")
    requests_csv = list(csv.DictReader(io.StringIO(client.get("/llm/requests.csv").get_data(as_text=True))))
    template = environment.web_ui.template_args

    assert [r["requests"] for r in data["table"]] == [3, 3]
    assert data["critical"]["text"] == "needs two finished steps"
    assert stats_csv[0]["name"] == "chat" and stats_csv[0]["requests"] == "3"
    assert series_csv.status_code == steps_csv.status_code == 200
    assert series_csv.get_data(as_text=True).startswith("t_s,elapsed_s,ttft_p50_ms")
    assert len(requests_csv) == 3
    assert [f["href"] for f in template["extended_csv_files"]][-1] == "./llm/requests.csv"
    assert client.get("/llm/static/llm_live.js").status_code == 200
    assert client.get("/llm/static/../web.py").status_code == 404
    assert 'id="llm-live-root"' in client.get("/llm/").get_data(as_text=True)


def test_without_a_run_directory_there_is_no_requests_download(tmp_path):
    environment = make_environment(tmp_path)
    client = environment.web_ui.app.test_client()

    assert client.get("/llm/requests.csv").status_code == 404
    assert all("requests.csv" not in f["href"] for f in environment.web_ui.template_args["extended_csv_files"])


class AuthUser(UserMixin):
    def __init__(self, name: str) -> None:
        self.id = name


@pytest.mark.parametrize("path", ["/llm/data", "/llm/", "/llm/stats.csv", "/llm/series.csv", "/llm/steps.csv",
                                  "/llm/static/llm_live.js", "/stats/requests"])  # fmt: skip
def test_web_login_refuses_the_llm_routes_until_signed_in(tmp_path, path):
    environment = make_environment(tmp_path, web_login=True)
    web_ui = environment.web_ui
    web_ui.app.secret_key = "test"
    web_ui.login_manager.user_loader(AuthUser)
    sign_in = Blueprint("test_sign_in", __name__)

    @sign_in.route("/test-sign-in")
    def test_sign_in():
        login_user(AuthUser("tester"))
        return "ok"

    web_ui.app.register_blueprint(sign_in)
    client = web_ui.app.test_client()

    refused = client.get(path)
    assert refused.status_code in (302, 401), refused.status_code
    assert b"extended_stats" not in refused.get_data()
    assert client.get("/test-sign-in").status_code == 200
    assert client.get(path).status_code == 200
