"""``llm-locust diagnose`` end to end on two embedded servers: the whole order and the A/B.

Expected attributions come from the servers' settings, not from the code under test: the same
engine with ``--max-num-seqs`` 2 vs 8 decodes a single request equally fast (20 + 1 ms a token)
but batches 4 users only in the second -> ``batching_or_scheduling``; ``--slowdown 2`` doubles every
step, single request and batch alike -> ``compute_cost``, decode rate about halved. Round A
(``--max-num-seqs 2``) is measured once and both second rounds are compared with it
(``--compare-to``), as a user compares each new round with the same earlier one. Every delta in
``compare.json`` is recomputed here from the two rounds' ``requests.csv``.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from llm_locust.run.demo import start_sim_server
from llm_locust.run.launcher import free_port, stop_process
from tests.compare_recompute import single_decode_median, step_tps
from tests.e2e.side_by_side import run_side_by_side

pytestmark = pytest.mark.slow


ROUND_ARGS = [
    "--model", "sim-llama", "--ladder", "1,2,4", "--max-users", "4", "--dwell-s", "6", "--warmup-s", "1.5",
    "--baseline-requests", "6", "--max-tokens", "32", "--workers", "1",
]  # fmt: skip
"""Every round: the same script and inputs (the playbook's one change is the server's)."""


def _start_diagnose(server_args: list[str], log: Path, out: Path, *extra: str) -> tuple:
    """Start an embedded server (``--max-num-seqs N`` and other flags) and ``diagnose`` on it;
    returns (server, diagnose process with stdout and stderr piped together, text)."""
    at = server_args.index("--max-num-seqs")
    seqs, rest = int(server_args[at + 1]), server_args[:at] + server_args[at + 2 :]
    port = free_port()
    server = start_sim_server(port=port, max_num_seqs=seqs, log_path=log, extra=rest)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "llm_locust.cli", "diagnose", "--host", f"http://127.0.0.1:{port}", *ROUND_ARGS,
             "--server-log", str(log), "--out", str(out), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    except BaseException:
        stop_process(server, grace_s=5)
        raise
    return server, process


@pytest.fixture(scope="module")
def round_a(tmp_path_factory) -> Path:
    """Round A of both A/Bs, measured once: ``--max-num-seqs 2`` (``diagnose`` of one server)."""
    tmp = tmp_path_factory.mktemp("round-a")
    ((returncode, output),) = run_side_by_side(
        {"a": functools.partial(_start_diagnose, ["--max-num-seqs", "2"], tmp / "a.log", tmp / "out")},
        width=1,
        timeout_s=400,
    ).values()
    assert returncode == 0, output[-6000:]
    return tmp / "out" / "round-a"


B_SERVERS = {"batch_ceiling": ["--max-num-seqs", "8"], "slowdown": ["--max-num-seqs", "2", "--slowdown", "2"]}
"""Round B's server of each A/B: the one change from round A's ``--max-num-seqs 2``."""


@pytest.fixture(scope="module")
def b_rounds(tmp_path_factory, round_a) -> dict:
    """Both B rounds side by side (:mod:`tests.e2e.side_by_side`: each an embedded server and a
    one-worker ``diagnose``, light enough that two at once take the time of one), each compared
    with round A (``--compare-to``): ``{name: (a, b, out, returncode, console)}``."""
    outs = {name: tmp_path_factory.mktemp(f"round-b-{name}") for name in B_SERVERS}
    starts = {
        name: functools.partial(_start_diagnose, server, outs[name] / "b.log", outs[name] / "out",
                                "--compare-to", str(round_a))
        for name, server in B_SERVERS.items()
    }  # fmt: skip
    consoles = run_side_by_side(starts, width=len(starts), timeout_s=400)
    return {name: (round_a, outs[name] / "out" / "round-a", outs[name] / "out", *consoles[name]) for name in B_SERVERS}


def _check_deltas(a: Path, b: Path, out: Path):
    """compare.json's deltas against the ones recomputed from requests.csv; returns the attribution."""
    attribution = json.loads((out / "compare" / "compare.json").read_text())["attribution"]
    expected = single_decode_median(b / "baseline") / single_decode_median(a / "baseline")
    assert attribution["single_request"]["decode_tps_ratio"]["value"] == pytest.approx(expected, rel=1e-9)
    for step in attribution["concurrent"]["common_steps"]:
        users = step["users"]
        assert step["output_tps_ratio"]["value"] == pytest.approx(
            step_tps(b / "ladder", users) / step_tps(a / "ladder", users), rel=1e-9
        )
    return attribution


def test_batch_ceiling_ab_is_batching_or_scheduling(b_rounds):
    a, b, out, returncode, console = b_rounds["batch_ceiling"]
    assert returncode == 0, console[-6000:]

    attribution = _check_deltas(a, b, out)
    assert attribution["kind"] == "batching_or_scheduling", attribution["evidence"]
    assert abs(attribution["single_request"]["decode_tps_ratio"]["value"] - 1) < 0.1
    # the knee each round reports (the critical-concurrency rule, tested on its own), its throughput
    # recomputed here; round b runs 4 at once where round a runs 2: about 4*1000/24 vs 2*1000/22
    rounds = json.loads((out / "compare" / "compare.json").read_text())["rounds"]
    knee_a, knee_b = rounds[0]["knee_users"], rounds[1]["knee_users"]
    knee = attribution["concurrent"]["knee_output_tps_ratio"]["value"]
    assert knee == pytest.approx(step_tps(b / "ladder", knee_b) / step_tps(a / "ladder", knee_a), rel=1e-9)
    assert knee_b == 4
    assert knee > 1.4
    assert "1. single-request baseline" in console and "2. startup-config check" in console
    assert "Attribution (round 2 vs round 1): batching_or_scheduling" in console
    index = (out / "report" / "index.html").read_text()
    for name in ("throughput_by_round.png", "round-a/ladder/report/throughput.png", "rounds.csv", str(a)):
        assert name in index
    # the change is read from the servers' startup logs (no label was given)
    change = json.loads((out / "compare" / "compare.json").read_text())["rounds"][1]["change"]
    assert change == "server.batch_ceiling (max_num_seqs): 2 -> 8", change


def test_slowdown_ab_is_compute_cost(b_rounds):
    a, b, out, returncode, console = b_rounds["slowdown"]
    assert returncode == 0, console[-6000:]

    attribution = _check_deltas(a, b, out)
    assert attribution["kind"] == "compute_cost", attribution["evidence"]
    assert attribution["single_request"]["decode_tps_ratio"]["value"] == pytest.approx(0.5, rel=0.15)
