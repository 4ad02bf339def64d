"""What the master captures about the server (llm_locust/master/servercapture.py, config.metrics_urls)."""

import argparse
import json

import gevent
import pytest

from llm_locust.master.config import metrics_targets, metrics_urls
from llm_locust.master.servercapture import ServerCapture, fetch_server_info
from llm_locust.options import validate_options
from llm_locust.run.demo import start_sim_server
from llm_locust.run.launcher import free_port, stop_process


def options(**kw):
    base = dict(metrics_url="", server_metrics_url=[], server_log="", server_log_format="", api_key="")
    return argparse.Namespace(**{**base, **kw})


def test_server_metrics_urls_replace_the_default_and_add_to_metrics_url_without_repeats():
    host = "http://127.0.0.1:8000"
    assert metrics_urls(options(), host) == [f"{host}/metrics"]
    # a gateway at --host and its backends given: the gateway's /metrics (one backend or another) is not scraped
    assert metrics_urls(
        options(server_metrics_url=["http://gpu:9400/metrics,http://b/metrics", "http://b/metrics"]), host
    ) == ["http://gpu:9400/metrics", "http://b/metrics"]
    assert metrics_urls(
        options(metrics_url=f"{host}/metrics", server_metrics_url=["http://gpu:9400/metrics"]), host
    ) == [
        f"{host}/metrics",
        "http://gpu:9400/metrics",
    ]
    assert metrics_urls(options(metrics_url="none", server_metrics_url=["http://x/m"]), host) == ["http://x/m"]


def test_metrics_targets_names_origins_and_a_name_given_twice_refused():
    host = "http://gw:80"
    targets = metrics_targets(
        options(server_metrics_url=["a=http://127.0.0.1:8001/metrics", "http://127.0.0.1:8002/metrics?x=1"]), host
    )
    assert [(t.name, t.url, t.origin) for t in targets] == [
        ("a", "http://127.0.0.1:8001/metrics", "--server-metrics-url"),
        ("127.0.0.1:8002", "http://127.0.0.1:8002/metrics?x=1", "--server-metrics-url"),
    ]
    assert [t.origin for t in metrics_targets(options(), host)] == ["default"]
    two = ["http://h:1/a", "http://h:1/b"]  # one host:port, two paths: the paths tell them apart
    assert [t.name for t in metrics_targets(options(server_metrics_url=two), host)] == ["h:1/a", "h:1/b"]
    with pytest.raises(ValueError, match="named 'a'"):
        validate_options(options(server_metrics_url=["a=http://x:1/m", "a=http://y:1/m"]))


def test_props_of_the_llamacpp_flavour_and_the_capture_files(tmp_path):
    port = free_port()
    server = start_sim_server(
        port=port, max_num_seqs=3, log_path=tmp_path / "engine.log", extra=["--flavor", "llamacpp"]
    )
    try:
        host = f"http://127.0.0.1:{port}"
        info = fetch_server_info(host)
        assert list(info) == [f"{host}/props"] and info[f"{host}/props"]["total_slots"] == 3
        (tmp_path / "fmt.toml").write_text("name = 'x'\n")
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        capture = ServerCapture(
            options(server_log=str(tmp_path / "engine.log"), server_log_format=str(tmp_path / "fmt.toml")),
            host,
            run_dir,
        )
        capture.start()
        gevent.sleep(0.3)
        capture.stop()
        capture.stop()  # idempotent
    finally:
        stop_process(server, grace_s=10)
    assert json.loads((run_dir / "server_info.json").read_text()) == info
    assert (run_dir / "server_log_format.toml").read_text() == "name = 'x'\n"
    assert "n_slots = 3" in (run_dir / "server.log").read_text()
    assert set(capture.meta) == {"utc_offset_s", "server_log", "server_log_format"}
