"""Every engine flavour of the embedded server, end to end: ``run`` (master + 1 worker, the log
followed with ``--server-log``, ``/metrics`` scraped) -> ``analyze`` from the log alone, the
metrics alone and both. The scheduler is the same for every flavour (batch ceiling 2), so each
must give critical concurrency 2 and read the configured ceiling of 2 back.

Short on purpose (CI on 2 cores): the five runs side by side, ladder 1, 2, 4, 5 s a step; stats lines and scrapes every
0.5 s. Expected: up to 2 users every request runs at once; at 4, two wait a whole request
(32 steps) for a slot, so throughput stays flat while TTFT jumps.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pytest

from llm_locust.analysis.pipeline import analyze_run
from llm_locust.analysis.server.sources import ServerOptions, ServerSource
from llm_locust.run.demo import start_sim_server
from llm_locust.run.launcher import free_port, stop_process
from llm_locust.simserver.config import FLAVOR_NAMES
from llm_locust.simserver.flavors.generic import FORMAT_TOML
from tests.e2e.side_by_side import run_side_by_side

pytestmark = pytest.mark.slow

MAX_NUM_SEQS = 2
CEILING_NAMES = {
    "vllm": "max_num_seqs",
    "sglang": "max_running_requests",
    "tgi": "max_batch_size",
    "llamacpp": "n_slots",
    "generic": "max_batch_size",
}


def _start(flavor: str, tmp: Path) -> tuple[subprocess.Popen, subprocess.Popen]:
    """Start one flavour's embedded server and its ``llm-locust run``; returns (server, run process)."""
    port = free_port()
    server = start_sim_server(
        port=port,
        max_num_seqs=MAX_NUM_SEQS,
        log_path=tmp / "engine.log",
        extra=["--flavor", flavor, "--log-stats-interval-s", "0.5"],
    )
    args = [
        sys.executable,
        "-m",
        "llm_locust.cli",
        "run",
        "--host",
        f"http://127.0.0.1:{port}",
        "--model",
        "sim-llama",
        "--workers",
        "1",
        "--run-dir",
        str(tmp / "run"),
        "--no-analyze",
        "--timeout-s",
        "120",
        "--ladder",
        "1,2,4",
        "--dwell-s",
        "5",
        "--warmup-s",
        "1.5",
        "--max-tokens",
        "32",
        "--scrape-interval-s",
        "0.5",
        "--server-log",
        str(tmp / "engine.log"),
    ]
    if flavor == "generic":
        (tmp / "deepinfer.toml").write_text(FORMAT_TOML)
        args += ["--server-log-format", str(tmp / "deepinfer.toml")]
    try:
        return server, subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except BaseException:
        stop_process(server, grace_s=10)
        raise


@pytest.fixture(scope="module")
def flavor_runs(tmp_path_factory) -> dict:
    """Every flavour's run, side by side (:mod:`tests.e2e.side_by_side`): ``{flavor: (run_dir, console)}``."""
    folders = {flavor: tmp_path_factory.mktemp(flavor) for flavor in FLAVOR_NAMES}
    consoles = run_side_by_side(
        {flavor: functools.partial(_start, flavor, folders[flavor]) for flavor in FLAVOR_NAMES},
        width=len(FLAVOR_NAMES),
        timeout_s=180,
    )
    return {flavor: (folders[flavor] / "run", consoles[flavor]) for flavor in FLAVOR_NAMES}


@pytest.fixture(params=FLAVOR_NAMES)
def flavor_run(request, flavor_runs):
    flavor = request.param
    run_dir, (returncode, output) = flavor_runs[flavor]
    assert returncode == 0, output
    return flavor, run_dir


@pytest.mark.parametrize("source", [ServerSource.LOG, ServerSource.METRICS, ServerSource.BOTH])
def test_same_critical_concurrency_from_each_source(flavor_run, source):
    flavor, run_dir = flavor_run
    result = analyze_run(run_dir, write=False, server=ServerOptions(source=source))
    evidence = "\n".join(result.critical.evidence)
    assert result.critical.users == MAX_NUM_SEQS, evidence
    table = result.table.set_index("target_users")
    assert table.loc[4, "server_running"] == pytest.approx(MAX_NUM_SEQS, abs=0.3), table
    assert table.loc[1, "server_running"] == pytest.approx(1, abs=0.3), table
    family = "generic" if flavor == "generic" else flavor
    if source is ServerSource.LOG:
        assert f"server log ({family} parser" in evidence
        assert set(table["server_source"]) == {"log"}
    elif source is ServerSource.METRICS:
        assert f"/metrics ({family} mapping" in evidence
        assert set(table["server_source"]) == {"metrics"}
    else:
        assert "metrics first, the log where metrics have no value" in evidence


def test_configured_ceiling_read_back_and_in_effect(flavor_run):
    flavor, run_dir = flavor_run
    result = analyze_run(run_dir)
    config = result.evidence.config
    assert (config.batch_ceiling, config.batch_ceiling_name) == (MAX_NUM_SEQS, CEILING_NAMES[flavor])
    assert result.config_check.took_effect is True, result.config_check.line
    assert "Batching settings took effect: yes" in result.paths.summary_md.read_text()
    assert (run_dir / "server_log_stamps.csv").is_file()
    assert not result.evidence.log.unplaced_lines


def test_llamacpp_timings_recorded_as_the_server_logged_them(flavor_run):
    """llama.cpp's flavour sends ``timings`` on the last chunk; the client records them as sent:
    the same prefill and decode times the server's own ``print_timing`` lines give (an
    independent path: the log, parsed here with a regex). Other flavours send none."""
    import csv
    import math
    import re

    flavor, run_dir = flavor_run
    with open(run_dir / "requests.csv", newline="") as f:
        ok = [r for r in csv.DictReader(f) if r["error_kind"] == ""]
    recorded = sorted(float(r["server_prompt_ms"] or "nan") for r in ok)
    if flavor != "llamacpp":
        assert all(math.isnan(v) for v in recorded)
        return
    log = (run_dir / "server.log").read_text()
    logged_prompt = [float(v) for v in re.findall(r"prompt eval time = +([\d.]+) ms", log)]
    logged_decode = [float(v) for v in re.findall(r"\n[^\n]* {7}eval time = +([\d.]+) ms", log)]
    by_prompt = {round(v, 2) for v in logged_prompt}
    assert all(round(v, 2) in by_prompt for v in recorded), (recorded[:5], logged_prompt[:5])
    decode = {round(v, 2) for v in logged_decode}
    assert all(round(float(r["server_decode_ms"]), 2) in decode for r in ok)
    assert all(float(r["server_decode_tokens"]) == float(r["output_tokens"]) for r in ok)
    assert all(float(r["server_prompt_ms"]) <= float(r["ttft_ms"]) for r in ok)
