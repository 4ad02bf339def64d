"""Streams cut after the server answered (issue 25, item 7): a gateway's or server's timeout
lines account for them as timeouts; without such lines they stay the server's failures to
complete (rejections), and a 504 takes a line before a cut stream does."""

from __future__ import annotations

import re

import pandas as pd

from llm_locust.analysis.perrequest.gatewaypage import GatewayTimeouts, gateway_timeouts
from llm_locust.analysis.server.serverlog import LogText
from llm_locust.analysis.server.serverlog.errors import scan_errors
from llm_locust.analysis.server.userformat import error_settings, format_file_path, load_user_format
from llm_locust.analysis.verdict.failures import client_failures, failures, step_failure_kind
from llm_locust.analysis.verdict.recommend import recommend
from llm_locust.analysis.verdict.types import RULES, BottleneckKind


def row(error_kinds: str, server_error_kinds: str, cut_streams: int) -> pd.Series:
    return pd.Series({"error_kinds": error_kinds, "server_error_kinds": server_error_kinds,
                      "cut_streams": cut_streams})  # fmt: skip


def test_cut_streams_the_timeout_lines_account_for_are_timeouts():
    # 12 cut streams, 10 timeout lines in the window (nginx stamps to the second: two at its
    # edge fell outside): 10 are timeouts, 2 stay connection errors
    assert client_failures(row("connection_error:12", "timeout:10", 12)) == {
        "connection_error": 2,
        "connection_error_timed_out": 10,
    }
    assert step_failure_kind(row("connection_error:12", "timeout:10", 12)) is BottleneckKind.TIMEOUTS


def test_refused_connections_are_never_moved_only_the_cut_ones():
    # 6 connection errors of which 2 cut after their 200 (4 refused): 2 lines' worth at most
    assert client_failures(row("connection_error:6", "timeout:5", 2)) == {
        "connection_error": 4,
        "connection_error_timed_out": 2,
    }
    assert step_failure_kind(row("connection_error:6", "timeout:5", 2)) is BottleneckKind.REJECTIONS


def test_without_timeout_lines_cut_streams_stay_failures_to_complete():
    assert client_failures(row("connection_error:8", "dropped:8", 8)) == {"connection_error": 8}
    assert step_failure_kind(row("connection_error:8", "", 8)) is BottleneckKind.REJECTIONS


def test_a_504_takes_a_line_before_a_cut_stream():
    # 3 lines for 2 504s and 4 cut streams: both 504s, then 1 cut stream
    assert client_failures(row("connection_error:4 http_5xx:2", "timeout:3", 4)) == {
        "connection_error": 3,
        "connection_error_timed_out": 1,
        "http_5xx_timed_out": 2,
    }


def test_an_older_table_without_cut_streams_moves_none():
    counts = client_failures(pd.Series({"error_kinds": "connection_error:3", "server_error_kinds": "timeout:3"}))
    assert counts == {"connection_error": 3}


def test_the_timeouts_rule_names_the_cut_streams_and_the_lines():
    """Ladder 2, 4, 8: at 8 users 12 of 24 finished requests were cut and 12 timeout lines are in
    the window; half the users' time went to them (failed_time_share 0.5, >= 5 %)."""
    table = pd.DataFrame({
        "step": [0, 1, 2], "target_users": [2.0, 4.0, 8.0], "valid": [True, True, True],
        "completed": [10, 20, 12], "error_kinds": ["", "", "connection_error:12"],
        "server_error_kinds": ["", "", "timeout:12"], "cut_streams": [0, 0, 12],
        "failed_share": [0.0, 0.0, 0.5], "failed_time_share": [0.0, 0.0, 0.5],
    })  # fmt: skip
    evidence = failures(table, BottleneckKind.TIMEOUTS, RULES)
    assert evidence.holds and evidence.values["users"] == 8.0
    assert evidence.values["client_connection_error_timed_out"] == 12 and evidence.values["server_timeout"] == 12
    assert "connection_error_timed_out 12" in evidence.text and "the server log has timeout 12" in evidence.text
    assert not failures(table, BottleneckKind.REJECTIONS, RULES).holds


def _timeouts_at_8():
    table = pd.DataFrame({
        "step": [0, 1, 2], "target_users": [2.0, 4.0, 8.0], "valid": [True, True, True],
        "completed": [10, 20, 12], "error_kinds": ["", "", "connection_error:12"],
        "server_error_kinds": ["", "", "timeout:12"], "cut_streams": [0, 0, 12],
        "failed_share": [0.0, 0.0, 0.5], "failed_time_share": [0.0, 0.0, 0.5],
    })  # fmt: skip
    return {"timeouts": failures(table, BottleneckKind.TIMEOUTS, RULES)}


def test_timeouts_the_log_names_a_setting_for_are_recommended_against_it():
    """nginx-error.toml names proxy_read_timeout behind its 'upstream timed out' lines: the
    first recommendation raises it (not the server's queue, which is not what cut the streams)."""
    recs = recommend(
        BottleneckKind.TIMEOUTS, (), _timeouts_at_8(), family="vllm", critical_users=4.0, client_flags={},
        error_settings={"timeout": "proxy_read_timeout"},
    )  # fmt: skip
    assert recs[0].flag == "proxy_read_timeout" and recs[0].because == "timeouts"
    assert "raise proxy_read_timeout above the requests' E2E at 8 users" in recs[0].change
    assert "12 timeout lines" in recs[0].change
    assert "timeout lines fall to 0" in recs[0].verify
    assert len(recs) >= 2 and recs[1].flag != "proxy_read_timeout"  # the server-side change stays


def test_without_a_named_setting_no_gateway_recommendation():
    for settings in (None, {}, {"rejected": "limit_conn"}):
        recs = recommend(
            BottleneckKind.TIMEOUTS, (), _timeouts_at_8(), family="vllm", critical_users=4.0, client_flags={},
            error_settings=settings,
        )  # fmt: skip
        assert recs and all("raise " not in r.change for r in recs)


def test_the_shipped_nginx_format_names_its_timeouts_settings():
    fmt = load_user_format(format_file_path("nginx-error").read_text(encoding="utf-8"))
    assert error_settings(fmt) == {"timeout": "proxy_connect_timeout / proxy_read_timeout"}
    text = "upstream timed out (110: Connection timed out) while reading upstream"
    kinds = [kind for kind, pattern in fmt.error_patterns if re.search(pattern, text)]
    settings = [s for k, s in fmt.error_settings if k == "timeout"]
    assert kinds == ["timeout"] and settings == ["proxy_connect_timeout", "proxy_read_timeout"]


NGINX_LINES = [  # nginx 1.22's error log (src/http/ngx_http_upstream.c), a run with read timeouts only
    "2026/12/07 11:22:14 [error] 15169#15169: *15 upstream timed out (110: Connection timed out) while reading "
    'response header from upstream, client: 127.0.0.1, server: , request: "POST /v1/chat/completions HTTP/1.1", '
    'upstream: "http://127.0.0.1:18101/v1/chat/completions", host: "127.0.0.1:18103"',
    "2026/12/07 11:22:15 [error] 15169#15169: *16 upstream timed out (110: Connection timed out) while reading "
    'upstream, client: 127.0.0.1, server: , request: "POST /v1/chat/completions HTTP/1.1", '
    'upstream: "http://127.0.0.1:18101/v1/chat/completions", host: "127.0.0.1:18103"',
    '2026/12/07 11:22:16 [error] 15169#15169: *17 limiting connections by zone "perclient", client: 127.0.0.1, '
    'server: , request: "POST /v1/chat/completions HTTP/1.1", host: "127.0.0.1:18103"',
]


def test_the_setting_named_is_the_one_behind_the_lines_the_log_holds():
    """Read timeouts only: the recommendation names proxy_read_timeout, not also the connect
    timeout whose pattern matched nothing (the format's per-kind list said both)."""
    fmt = load_user_format(format_file_path("nginx-error").read_text(encoding="utf-8"))
    errors = scan_errors(
        LogText.from_text("\n".join(NGINX_LINES)), extra=fmt.error_patterns, settings=fmt.error_pattern_settings
    )
    assert errors["setting"].tolist() == ["proxy_read_timeout", "proxy_read_timeout", ""]
    assert error_settings(fmt, errors) == {"timeout": "proxy_read_timeout"}
    connect = NGINX_LINES[0].replace("reading response header from upstream", "connecting to upstream")
    both = scan_errors(LogText.from_text(connect + "\n" + NGINX_LINES[1]), extra=fmt.error_patterns,
                       settings=fmt.error_pattern_settings)  # fmt: skip
    assert error_settings(fmt, both) == {"timeout": "proxy_connect_timeout / proxy_read_timeout"}


def test_504s_are_timeouts_without_any_log_and_take_the_lines_a_server_logs_for_them():
    """RFC 9110's 504 Gateway Timeout: a gateway gave up waiting for the upstream (or a server for
    a queued request) - a timeout, also with no server log; a 503 beside them stays a rejection.
    A server that logs a line per 504 it sends does not get those lines counted twice."""
    bare = pd.Series({"error_kinds": "http_5xx:10", "server_error_kinds": "", "cut_streams": 0, "http_504": 7})
    assert client_failures(bare) == {"http_5xx": 3, "http_5xx_timed_out": 7}
    assert step_failure_kind(bare) is BottleneckKind.TIMEOUTS
    logged = pd.Series({"error_kinds": "http_5xx:10", "server_error_kinds": "timeout:7", "cut_streams": 0,
                        "http_504": 7})  # fmt: skip
    assert client_failures(logged) == {"http_5xx": 3, "http_5xx_timed_out": 7}  # the 3 503s keep no line
    older = pd.Series({"error_kinds": "http_5xx:10", "server_error_kinds": "", "cut_streams": 0})
    assert client_failures(older) == {"http_5xx": 10}  # a table written before the column


def test_without_the_log_nginxs_504_page_names_its_read_timeout():
    """No gateway log: the 12 answers are 504s carrying nginx's own error page (as Debian's nginx
    1.22.1 answers them), so the first recommendation raises proxy_read_timeout; a 504 page of
    no known gateway leaves the setting unnamed."""
    frame = pd.DataFrame({"status_code": [504] * 12 + [200],
                          "error_message": ["HTTP 504 <html> <head><title>504 Gateway Time-out</title></head> <body> "
                                            "<center><h1>504 Gateway Time-out</h1></center> <hr><center>nginx/1.22.1"
                                            "</center> </body> </html>"] * 12 + [""]})  # fmt: skip
    page = gateway_timeouts(frame)
    assert page == GatewayTimeouts("nginx", "proxy_read_timeout", 12)
    assert gateway_timeouts(frame.assign(error_message="HTTP 504 timed out in queue")) is None
    table = pd.DataFrame({
        "step": [0, 1, 2], "target_users": [2.0, 4.0, 8.0], "valid": [True, True, True],
        "completed": [10, 20, 12], "error_kinds": ["", "", "http_5xx:12"], "server_error_kinds": ["", "", ""],
        "cut_streams": [0, 0, 0], "http_504": [0, 0, 12],
        "failed_share": [0.0, 0.0, 0.5], "failed_time_share": [0.0, 0.0, 0.5],
    })  # fmt: skip
    ev = {"timeouts": failures(table, BottleneckKind.TIMEOUTS, RULES, server_log=False)}
    assert ev["timeouts"].holds and ev["timeouts"].values["client_http_5xx_timed_out"] == 12
    recs = recommend(
        BottleneckKind.TIMEOUTS, (), ev, family="vllm", critical_users=4.0, client_flags={},
        error_settings={"timeout": page.setting}, timeout_page=page.gateway,
    )  # fmt: skip
    assert recs[0].flag == "proxy_read_timeout"
    assert "the 12 504 answers there are nginx's own error page" in recs[0].change
    assert "its 504s fall to 0" in recs[0].verify
