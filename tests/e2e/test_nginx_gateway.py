"""A real nginx (Debian's package) in front of the embedded server, on loopback (issue 25, items
7 and 8, the gateway half): what the verdict says behind a gateway, checked against what the
nginx config implies.

One nginx (two sites) and two embedded servers serve the module:

- site ``limited``: ``limit_conn 4`` keyed on ``$binary_remote_addr`` (every loopback client is one
  key; an empty key such as ``$server_name`` without a ``server_name`` never limits) with
  ``limit_conn_status 503``, in front of ``sim-server --max-num-seqs 16``. The fifth concurrent
  request is refused at once, so a ladder 1-16 scales to 4 users and is refused from 8:
  ``rejections``, critical concurrency 4, and nginx's ``limiting connections by zone`` lines,
  read through the shipped ``nginx-error`` format file, counted beside the client's 503s.
  Scraping ``/metrics`` through the gateway (``--host`` at nginx, no ``--metrics-url``), the
  scrapes compete for the same 4 slots and are refused too: their lines are not the users'
  rejections, and the refused scrapes are said, not left as blank steps.
- site ``short_timeout``: ``proxy_read_timeout 1.2s`` in front of ``--max-num-seqs 4``;
  non-streaming requests of 32 tokens take ~0.8 s with up to 4 in flight and ~1.6 s once half
  of them queue for a slot (8 users): nginx answers 504 ``upstream timed out ... while reading
  response header from upstream``: ``timeouts``, critical concurrency 4 (the server's 4 slots).
- site ``stream_timeout``: ``proxy_read_timeout 0.6s`` in front of the same ``--max-num-seqs 4``
  server, streaming 48 tokens (~1.2 s a request, a token every ~25 ms). The server sends its 200
  at once, also to a request that waits for a slot; from 8 users half of them wait ~1.2 s
  without a byte, and nginx cuts them after their 200 (``upstream timed out ... while reading
  upstream``): the client sees the connection closed mid-stream. Those are timeouts the
  gateway's lines account for, not a server outage (the server answered every other request
  meanwhile): ``timeouts``, critical concurrency 4. (0.6 s, not less: nginx moves a read timer
  only by 300 ms or more, ``NGX_TIMER_LAZY_DELAY``, so a stream still sending may be cut after a
  gap of ``timeout - 0.3 s``.)

The issue's output behind nginx ("rejections at 8 users" beside "Critical concurrency: 8
(failures dominate at 16 users)", and "the server log shows no such line" with 156 such lines in
nginx's log) is reproduced by the first case and must not come back.
"""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import requests

from llm_locust.analysis.pipeline import analyze_run
from llm_locust.run.demo import SIM_MODEL, start_sim_server
from llm_locust.run.launcher import free_port, stop_process
from tests.nginx import GatewaySite, nginx_gateway
from tests.verdict_contract import contract_problems

pytestmark = pytest.mark.slow

LIMIT = 4
"""The gateway's ``limit_conn``."""
SLOTS = 4
"""The timeout case's ``--max-num-seqs``: requests queue from 8 users."""
LADDER = (1, 2, 4, 8, 16)
LINE_STAMP = re.compile(r"^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d) \[error\]")


@dataclass(frozen=True)
class Module:
    limited: GatewaySite
    short_timeout: GatewaySite
    stream_timeout: GatewaySite
    backend16: str
    backend4: str
    logs: dict
    tmp: Path


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gateway")
    ports = {name: free_port() for name in ("b16", "b4")}
    servers = []
    try:
        for name, seqs in (("b16", 16), ("b4", SLOTS)):
            servers.append(start_sim_server(port=ports[name], max_num_seqs=seqs, log_path=tmp / f"{name}.log"))
        limited = GatewaySite(port=free_port(), upstreams=(f"127.0.0.1:{ports['b16']}",), limit_conn=LIMIT)
        short = GatewaySite(port=free_port(), upstreams=(f"127.0.0.1:{ports['b4']}",), proxy_read_timeout_s=1.2)
        stream = GatewaySite(port=free_port(), upstreams=(f"127.0.0.1:{ports['b4']}",), proxy_read_timeout_s=0.6)
        with nginx_gateway(tmp / "nginx", [limited, short, stream]) as nginx:
            logs = {site.port: nginx.site_error_log(site) for site in (limited, short, stream)}
            yield Module(limited, short, stream, f"127.0.0.1:{ports['b16']}", f"127.0.0.1:{ports['b4']}", logs, tmp)
    finally:
        for server in servers:
            stop_process(server, grace_s=10)


def _run(
    module: Module, site: GatewaySite, name: str, *extra: str, ladder=LADDER, max_tokens: int = 32
) -> tuple[Path, str]:
    """``llm-locust run`` through ``site`` with nginx's error log and the shipped format."""
    run_dir = module.tmp / name
    args = [
        sys.executable, "-m", "llm_locust.cli", "run", "--host", site.url, "--workers", "1",
        "--run-dir", str(run_dir), "--timeout-s", "90", "--ladder", ",".join(map(str, ladder)),
        "--dwell-s", "5", "--warmup-s", "1.5", "--max-tokens", str(max_tokens),
        "--server-log", str(module.logs[site.port]), "--server-log-format", "nginx-error", *extra,
    ]  # fmt: skip
    completed = subprocess.run(args, capture_output=True, text=True, timeout=180)
    console = completed.stdout + completed.stderr
    # refused or timed-out requests make Locust exit 1 (--exit-code-on-error); the analysis ran
    assert completed.returncode == 1, console[-4000:]
    return run_dir, console


def _verdict(run_dir: Path) -> dict:
    return json.loads((run_dir / "report" / "verdict.json").read_text())


def _lines_in_window(log: Path, run_dir: Path, users: int, pattern: str) -> tuple[int, int]:
    """nginx error lines matching ``pattern`` in the steady window of the step at ``users``:
    (those whose whole second lies inside it, those whose second overlaps it). nginx stamps its
    lines in local time to the second (read here with strptime; the test machine's zone is the
    run's), so a line stamped at a window's edge may be inside or not."""
    steps = pd.read_csv(run_dir / "report" / "steps.csv")
    row = steps[steps["target_users"] == users].iloc[0]
    inside = overlapping = 0
    for line in log.read_text().splitlines():
        stamp = LINE_STAMP.match(line)
        if stamp and re.search(pattern, line):
            t_s = dt.datetime.strptime(stamp.group(1), "%Y/%m/%d %H:%M:%S").astimezone().timestamp()
            inside += row["window_start_s"] <= t_s and t_s + 1 <= row["window_end_s"]
            overlapping += row["window_start_s"] < t_s + 1 and t_s < row["window_end_s"]
    return inside, overlapping


def _next_step(users: int, ladder=LADDER) -> int:
    return ladder[ladder.index(users) + 1]


def _common(verdict: dict, console: str, kind: str, critical: int, ladder=LADDER) -> dict:
    """The kind, the critical concurrency the config implies, one step named by the kind's
    text and by "Critical concurrency", the contract; returns the primary evidence."""
    assert verdict["bottleneck"] == kind, console[-4000:]
    assert verdict["critical_concurrency"] == critical, console[-4000:]
    primary = verdict["evidence"][0]
    failing = _next_step(critical, ladder)
    assert primary["rule"] == kind and primary["values"]["users"] == failing, primary
    assert primary["text"].startswith(f"at {failing} users ")
    assert re.search(rf"Critical concurrency: {critical} \([a-z ]+ at {failing} users\)", console), console[-3000:]
    assert contract_problems(verdict) == []
    texts = " | ".join(e["text"] for e in verdict["evidence"])
    assert "shows no such line" not in texts and "no server log" not in texts, texts
    return primary


@pytest.fixture(scope="module")
def limited_run(gateway):
    return _run(gateway, gateway.limited, "limited", "--metrics-url", f"http://{gateway.backend16}/metrics")


def test_limit_conn_is_rejections_at_its_limit_with_nginx_lines_counted(gateway, limited_run):
    run_dir, console = limited_run
    primary = _common(_verdict(run_dir), console, "rejections", LIMIT)
    failing = _next_step(LIMIT)
    inside, overlapping = _lines_in_window(
        gateway.logs[gateway.limited.port], run_dir, failing, "limiting connections by zone"
    )
    values = primary["values"]
    # the evidence quotes the server side's count, read from nginx's own lines
    assert inside > 0 and inside <= values["server_rejected"] <= overlapping, (values, inside, overlapping)
    assert f"the server log has rejected {values['server_rejected']}" in primary["text"]
    # and it is the client's 503s (nginx answers each over-limit request itself, one line each)
    assert abs(values["client_http_5xx"] - values["server_rejected"]) <= 2, values


@pytest.fixture(scope="module")
def scraped_through_gateway(gateway):
    return _run(gateway, gateway.limited, "scraped", ladder=(2, 4, 8))  # /metrics of --host: nginx's


def test_scrapes_refused_by_the_gateway_are_said_and_not_the_users_rejections(gateway, scraped_through_gateway):
    run_dir, console = scraped_through_gateway
    log = gateway.logs[gateway.limited.port]
    scrapes = pd.read_csv(run_dir / "server_scrapes.csv")
    refused = int(((scrapes["ok"] == 0) & (scrapes["status_code"] == 503)).sum())
    assert refused > 0  # the scraper competes with the users for the 4 slots
    verdict = _verdict(run_dir)
    assert verdict["bottleneck"] == "rejections" and verdict["critical_concurrency"] == LIMIT, console[-4000:]
    assert contract_problems(verdict) == []
    primary = verdict["evidence"][0]
    inside, overlapping = _lines_in_window(log, run_dir, 8, r'limiting connections by zone .*request: "POST /v1/')
    assert inside <= primary["values"]["server_rejected"] <= overlapping, (primary["values"], inside, overlapping)
    # the scraper's own lines are nginx's too, and left out of the users' count
    assert sum(_lines_in_window(log, run_dir, 8, r'limiting connections by zone .*request: "GET /metrics')) > 0
    assert abs(primary["values"]["client_http_5xx"] - primary["values"]["server_rejected"]) <= 2
    # said on the console (the master's scrape summary and the analysis' server-data line) and
    # in the summary, with what to do
    url = f"{gateway.limited.url}/metrics"
    assert re.search(rf"{re.escape(url)} refused {refused} of {len(scrapes)} scrapes \(HTTP 503 {refused}\)", console)
    assert "scrape the server itself (--metrics-url http://<server>/metrics)" in console
    summary = (run_dir / "report" / "summary.md").read_text()
    assert re.search(r"\d+ server log error line\(s\) are the scraper's own requests \(/metrics: rejected", summary)


@pytest.fixture(scope="module")
def timeout_run(gateway):
    return _run(
        gateway, gateway.short_timeout, "timeout", "--no-stream", "--metrics-url", f"http://{gateway.backend4}/metrics"
    )


def test_proxy_read_timeout_is_timeouts_where_requests_begin_to_queue(gateway, timeout_run):
    run_dir, console = timeout_run
    verdict = _verdict(run_dir)
    primary = _common(verdict, console, "timeouts", SLOTS)
    _names_the_read_timeout(verdict)
    log = gateway.logs[gateway.short_timeout.port]
    inside, overlapping = _lines_in_window(log, run_dir, _next_step(SLOTS), "upstream timed out .* response header")
    values = primary["values"]
    assert inside > 0 and inside <= values["server_timeout"] <= overlapping, (values, inside, overlapping)
    # the client's 504s are timeouts (504 Gateway Timeout, and nginx's lines say so too)
    assert values.get("client_http_5xx_timed_out", 0) > 0, values


def test_without_the_gateways_log_its_504s_are_still_timeouts(timeout_run, tmp_path):
    """The same run analysed without nginx's error log: 504 Gateway Timeout is a timeout by its
    status (RFC 9110), so the kind and the critical concurrency stay; the timed-out count is the
    step's 504 answers, recounted here from requests.csv."""
    run_dir, _ = timeout_run
    copy = tmp_path / "no-log"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("report"))
    (copy / "server.log").unlink()
    result = analyze_run(copy, write=False)
    assert result.verdict.bottleneck.value == "timeouts", result.verdict.line
    assert result.verdict.critical_concurrency == SLOTS, result.verdict.line
    primary = result.verdict.evidence[0]
    steps = result.table.set_index("target_users")
    window = steps.loc[_next_step(SLOTS)]
    requests_csv = pd.read_csv(copy / "requests.csv")
    end_s = requests_csv["t_start_s"] + requests_csv["e2e_ms"] / 1000.0
    inside = (end_s >= window["window_start_s"]) & (end_s < window["window_end_s"])
    answered_504 = int((inside & (requests_csv["status_code"] == 504)).sum())
    assert answered_504 > 0 and primary.values["client_http_5xx_timed_out"] == answered_504, primary.values
    assert "no server log" in primary.text or "shows no such line" in primary.text, primary.text
    # nginx's own 504 page in the answers names the gateway and its setting
    first = result.verdict.recommendations[0]
    assert first.flag == "proxy_read_timeout" and first.because == "timeouts", result.verdict.recommendations
    assert f"the {answered_504} 504 answers there are nginx's own error page" in first.change, first.change


def _names_the_read_timeout(verdict: dict) -> None:
    """The first recommendation raises the gateway's timeout (the format file's setting behind its
    'upstream timed out' lines), not the engine's queue."""
    first = verdict["recommendations"][0]
    assert first["flag"] == "proxy_read_timeout" and first["because"] == "timeouts", verdict["recommendations"]
    assert first["change"].startswith("raise "), first


STREAM_LADDER = (2, 4, 8)


@pytest.fixture(scope="module")
def stream_timeout_run(gateway):
    return _run(
        gateway, gateway.stream_timeout, "stream-timeout", "--metrics-url", f"http://{gateway.backend4}/metrics",
        ladder=STREAM_LADDER, max_tokens=48,
    )  # fmt: skip


def test_streams_cut_by_proxy_read_timeout_are_timeouts_not_an_outage(gateway, stream_timeout_run):
    run_dir, console = stream_timeout_run
    requests_csv = pd.read_csv(run_dir / "requests.csv", keep_default_na=False)
    cut = requests_csv[(requests_csv["error_kind"] == "connection_error") & (requests_csv["status_code"] == 200)]
    assert len(cut) > 0, console[-4000:]  # nginx cut streams it had answered 200 for
    # no request failed to reach the server: every one got its status line
    assert (requests_csv["status_code"] > 0).all(), requests_csv["status_code"].value_counts()
    verdict = _verdict(run_dir)
    primary = _common(verdict, console, "timeouts", SLOTS, STREAM_LADDER)
    assert all(e["rule"] != "server_outage" or not e["holds"] for e in verdict["evidence"]), verdict["evidence"]
    assert "outage" not in console.lower(), console[-4000:]
    _names_the_read_timeout(verdict)
    failing = _next_step(SLOTS, STREAM_LADDER)
    inside, overlapping = _lines_in_window(
        gateway.logs[gateway.stream_timeout.port], run_dir, failing, r"upstream timed out .* while reading upstream"
    )
    values = primary["values"]
    assert inside > 0 and inside <= values["server_timeout"] <= overlapping, (values, inside, overlapping)
    # the cut streams of that step are the timed-out ones (each accounted for by one line)
    steps = pd.read_csv(run_dir / "report" / "steps.csv")
    row = steps[steps["target_users"] == failing].iloc[0]
    end_s = cut["t_start_s"] + cut["e2e_ms"] / 1000.0
    cut_there = int(((end_s >= row["window_start_s"]) & (end_s < row["window_end_s"])).sum())
    assert values["client_connection_error_timed_out"] == min(cut_there, values["server_timeout"]), (values, cut_there)


def _stream(url: str) -> int:
    body = {"model": SIM_MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 32, "stream": True}
    with requests.post(f"{url}/v1/chat/completions", json=body, stream=True, timeout=30) as response:
        response.content  # noqa: B018  (read to the end: the connection is held until then)
        return response.status_code


def test_limit_conn_refuses_what_is_over_the_limit_with_one_error_line_each(gateway):
    site = gateway.limited
    log = gateway.logs[site.port]
    before = len(log.read_text().splitlines()) if log.exists() else 0
    with concurrent.futures.ThreadPoolExecutor(LIMIT + 2) as pool:
        statuses = sorted(pool.map(lambda _: _stream(site.url), range(LIMIT + 2)))
    assert statuses == [200] * LIMIT + [503] * 2
    lines = log.read_text().splitlines()[before:]
    limited = [line for line in lines if re.search(r'limiting connections by zone "perclient"', line)]
    assert len(limited) == 2, lines
