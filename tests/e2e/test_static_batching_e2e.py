"""An in-house static batcher end to end (issue 25, item 3): the embedded server's generic
flavour (``POST /generate`` JSON lines, ``--batching static``, its batch log lines, 503 ``queue
full``, 504 ``timed out in queue``) loaded with ``--protocol generic`` and read through the
format file a user writes (:data:`llm_locust.simserver.flavors.generic.FORMAT_TOML`), no
``/metrics`` (``--metrics-url none``). Each case: the verdict's kind, and its critical
concurrency within one ladder step of the one the server's settings imply.

Batches: 32 tokens at 20 ms per step (~0.7 s per batch). With max batch 8 the batches fill at
8 users and a queue of 8 persists at 16 (critical 8); a queue limit of 4 refuses the rest
(503: ``rejections``); a queue timeout of 300 ms drops what waits behind a running batch
(504 + ``timed out in queue`` lines: ``timeouts``, not rejections); a 1.5 s batch wait is the
batch timer's doing, never ``client``; a ceiling of 1 that the startup line calls 8 is
``batching_off`` (critical 1).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys

import pytest

from llm_locust.run.demo import start_sim_server
from llm_locust.run.launcher import free_port, stop_process
from llm_locust.simserver.flavors.generic import FORMAT_TOML
from llm_locust.simserver.generic_api import PROTOCOL_TOML
from tests.e2e.side_by_side import run_side_by_side
from tests.verdict_contract import assert_verdict_contract

pytestmark = pytest.mark.slow

LADDER = (1, 2, 4, 8, 16)
STATIC = ["--batching", "static", "--decode-base-ms", "20"]

CASES: dict[str, tuple[list[str], str, int]] = {
    "max_batch_8": ([*STATIC, "--batch-wait-ms", "100"], "scheduler_ceiling", 8),
    "max_queue_4": ([*STATIC, "--batch-wait-ms", "100", "--max-queue", "4", "--reject-status", "503"], "rejections", 8),
    "queue_timeout": ([*STATIC, "--batch-wait-ms", "100", "--queue-timeout-ms", "300"], "timeouts", 8),
    "long_batch_wait": ([*STATIC, "--batch-wait-ms", "1500"], "scheduler_ceiling", 8),
    "max_batch_1": ([*STATIC, "--batch-wait-ms", "100", "--effective-max-num-seqs", "1"], "batching_off", 1),
}
"""name -> (server flags beyond ``--max-num-seqs 8``, expected kind, expected critical users)."""


def _start(name: str, tmp) -> tuple[subprocess.Popen, subprocess.Popen]:
    port = free_port()
    (tmp / "proto.toml").write_text(PROTOCOL_TOML)
    (tmp / "fmt.toml").write_text(FORMAT_TOML)
    server = start_sim_server(
        port=port,
        max_num_seqs=8,
        log_path=tmp / "engine.log",
        extra=["--flavor", "generic", "--log-stats-interval-s", "0.5", *CASES[name][0]],
    )
    args = [
        sys.executable, "-m", "llm_locust.cli", "run", "--host", f"http://127.0.0.1:{port}",
        "--protocol", "generic", "--protocol-format", str(tmp / "proto.toml"), "--workers", "1",
        "--run-dir", str(tmp / "run"), "--timeout-s", "60", "--ladder", ",".join(map(str, LADDER)),
        "--dwell-s", "5", "--warmup-s", "1.5", "--max-tokens", "32", "--metrics-url", "none",
        "--server-log", str(tmp / "engine.log"), "--server-log-format", str(tmp / "fmt.toml"),
    ]  # fmt: skip
    try:
        process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except BaseException:
        stop_process(server, grace_s=10)
        raise
    return server, process


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    folders = {name: tmp_path_factory.mktemp(name) for name in CASES}
    consoles = run_side_by_side(
        {name: functools.partial(_start, name, folders[name]) for name in CASES}, width=3, timeout_s=150
    )
    return {name: (folders[name] / "run", consoles[name]) for name in CASES}


def _within_one_step(found, expected: int) -> bool:
    if found is None:
        return False
    i = LADDER.index(expected)
    return LADDER[max(0, i - 1)] <= found <= LADDER[min(len(LADDER) - 1, i + 1)]


@pytest.mark.parametrize("name", list(CASES))
def test_the_verdict_names_the_static_batchers_limit(runs, name):
    run_dir, (returncode, console) = runs[name]
    _, kind, critical = CASES[name]
    # refused or dropped requests make Locust exit 1 (--exit-code-on-error); the analysis ran
    assert returncode == (1 if kind in ("rejections", "timeouts") else 0), console[-3000:]
    verdict = json.loads((run_dir / "report" / "verdict.json").read_text())
    assert verdict["bottleneck"] == kind, console[-3000:]
    assert _within_one_step(verdict["critical_concurrency"], critical), verdict["critical_concurrency"]
    assert_verdict_contract(verdict, console[-3000:])
    holds = {e["rule"]: e for e in verdict["evidence"] if e["holds"]}
    if name != "max_batch_1":
        # batches fill to max_batch_size = 8 with a queue: the static batch ceiling, and the
        # recommendations name continuous batching and the max batch size
        assert "static_batch" in holds and holds["static_batch"]["values"]["fill_ratio"] >= 0.9, holds.keys()
        changes = " | ".join(r["change"] for r in verdict["recommendations"])
        assert "continuous batching" in changes and "max batch size" in changes, changes
        assert "batch_wait" in holds  # at 1 user every batch is 1 request that waited the timer
    if name == "queue_timeout":
        timeouts = holds["timeouts"]["values"]
        # the client saw only 5xx; the server's "timed out in queue" lines make them timeouts
        assert timeouts.get("client_http_5xx_timed_out", 0) > 0 and timeouts.get("server_timeout", 0) > 0
    if name == "max_queue_4":
        assert holds["rejections"]["values"].get("server_queue_full", 0) > 0


SERIES_LINE = "[[log.series]]\npattern = 'batch size=(?P<running>\\d+), wait=[\\d.]+ms, queue=(?P<waiting>\\d+)'\n"
BATCH_TABLE = (
    "[[log.batches]]\n"
    "pattern = 'batch started size=(?P<batch_size>\\d+) wait=(?P<batch_wait_ms>[\\d.]+)ms queue=(?P<queue>\\d+)'\n"
)
BATCH_AS_SERIES = (
    "[[log.series]]\npattern = 'batch started size=(?P<running>\\d+) wait=[\\d.]+ms queue=(?P<waiting>\\d+)'\n"
)
MAPPINGS = {
    # the documented way (docs/verdicts.md): the batch line as the batch table only
    "batch_table": BATCH_TABLE,
    "as_series": BATCH_AS_SERIES,  # batch size as running, queue as waiting
    "both": BATCH_AS_SERIES + "\n" + BATCH_TABLE,
}
"""The three ways a user may map a static batcher's batch line, for a server whose log has only
that line (the generic flavour's periodic series line left out of the format file)."""


@pytest.mark.parametrize("mapping", list(MAPPINGS))
def test_the_verdict_does_not_depend_on_how_the_batch_line_is_mapped(runs, mapping, tmp_path):
    from llm_locust.analysis.pipeline import analyze_run

    run_dir, _ = runs["max_batch_8"]
    assert SERIES_LINE in FORMAT_TOML and BATCH_TABLE in FORMAT_TOML
    fmt = tmp_path / "fmt.toml"
    fmt.write_text(FORMAT_TOML.replace(SERIES_LINE, "").replace(BATCH_TABLE, MAPPINGS[mapping]))
    result = analyze_run(run_dir, write=False, server_log=run_dir.parent / "engine.log", server_log_format=fmt)
    verdict = result.verdict
    assert verdict.bottleneck.value == "scheduler_ceiling", verdict.line
    assert _within_one_step(verdict.critical_concurrency, 8), verdict.critical.text
    table = verdict.table.set_index("target_users")
    # the batches run at max_batch_size = 8 from 8 users on, and 16 users keep a queue of ~8: the
    # batch line's queue is what the batch left (0 at a full closed loop), the rest of the client's
    # 16 in flight wait where the counters miss them (hidden_inflight), whichever the mapping
    assert config_batch_ceiling(result) == 8
    assert table.loc[16, "server_running"] == pytest.approx(8, abs=1.0), table["server_running"]
    queued = table.loc[16, "server_waiting"] + table.loc[16, "hidden_inflight"]
    assert queued == pytest.approx(table.loc[16, "client_inflight"] - table.loc[16, "server_running"], abs=1.0)
    assert queued > 4, table[["server_waiting", "hidden_inflight"]]
    holds = {e.rule for e in verdict.evidence if e.holds}
    if mapping == "as_series":  # no batch table: the static batch evidence cannot be read, and it says how
        assert "static_batch" not in holds
        note = next(e for e in verdict.evidence if e.rule == "static_batch").text
        assert "[[log.batches]]" in note, note
    else:
        assert "static_batch" in holds, holds


def config_batch_ceiling(result) -> int | None:
    """The batch ceiling the analysis read from the startup line (the format's [[log.config]])."""
    return result.evidence.config.batch_ceiling
