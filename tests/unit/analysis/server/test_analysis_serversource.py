"""Choosing the server source of a run (llm_locust/analysis/server/sources.py) and what the report says:
the critical concurrency from the log alone, from metrics alone, from both."""

import csv
import time

import pandas as pd
import pytest

from llm_locust.analysis import analyze_run
from llm_locust.analysis.analyzecmd import main
from llm_locust.analysis.server.sources import ServerOptions, ServerSource
from tests.analysis_factories import T0, synthetic_ladder

USERS, SLOTS, DWELL_S = (1, 2, 4, 8), 4, 20.0


def vllm_log_lines(*, stamp_offset_s: float = 0.0) -> list[str]:
    """vLLM 0.32 stats lines (``vllm/v1/metrics/loggers.py``) every 2 s over the synthetic
    ladder: running min(c, 4), waiting max(c - 4, 0); stamps in UTC (no year)."""
    lines = [
        "(APIServer pid=1) INFO {} [api_utils.py:286] non-default args: {{'max_num_seqs': 4, "
        "'max_model_len': 2048}}".format(time.strftime("%m-%d %H:%M:%S", time.gmtime(T0 - 60)))
    ]
    for k, c in enumerate(USERS):
        for second in range(0, int(DWELL_S), 2):
            t = T0 + k * DWELL_S + second + stamp_offset_s
            lines.append(
                f"(APIServer pid=1) INFO {time.strftime('%m-%d %H:%M:%S', time.gmtime(t))} "
                f"[loggers.py:335] Engine 000: Avg prompt throughput: 20.0 tokens/s, Avg "
                f"generation throughput: 100.0 tokens/s, Running: {min(c, SLOTS)} reqs, Waiting: "
                f"{max(c - SLOTS, 0)} reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%"
            )
    return lines


@pytest.fixture
def log_only_run(tmp_path):
    run_dir = synthetic_ladder(tmp_path / "run", users=USERS, max_num_seqs=SLOTS, with_server=False)
    (run_dir / "server.log").write_text("\n".join(vllm_log_lines()) + "\n")
    return run_dir


def test_log_alone_finds_the_critical_concurrency(log_only_run):
    result = analyze_run(log_only_run)
    assert result.critical.users == SLOTS, "\n".join(result.critical.evidence)
    assert result.critical.evidence[0].startswith("server data (log only): server log (vllm parser")
    assert set(result.table["server_source"]) == {"log"}
    assert result.table["server_waiting"].tolist() == [0.0, 0.0, 0.0, 4.0]
    assert result.config_check.took_effect is True
    summary = result.paths.summary_md.read_text()
    assert (
        "**Batching settings took effect: yes, because running reached the configured "
        "max_num_seqs = 4 (highest running 4)**" in summary
    )
    assert "server log: vllm" in summary and "the lines' own stamps (read as local time UTC)" in summary


def test_metrics_policy_without_metrics_uses_no_server_data(log_only_run):
    result = analyze_run(log_only_run, write=False, server=ServerOptions(source=ServerSource.METRICS))
    assert result.table["server_running"].isna().all()
    assert result.critical.evidence[0].startswith("server data: none (policy metrics)")
    assert result.critical.users == SLOTS  # throughput and TTFT alone still see it


def test_both_fill_a_step_without_metrics_from_the_log(tmp_path):
    run_dir = synthetic_ladder(tmp_path / "run", users=USERS, max_num_seqs=SLOTS)
    with open(run_dir / "server_metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f)]
    step2 = (T0 + 2 * DWELL_S, T0 + 3 * DWELL_S)
    kept = [r for r in rows if not step2[0] <= float(r["t_s"]) < step2[1]]
    pd.DataFrame(kept).to_csv(run_dir / "server_metrics.csv", index=False)
    (run_dir / "server.log").write_text("\n".join(vllm_log_lines()) + "\n")

    result = analyze_run(run_dir, write=False, server=ServerOptions(source=ServerSource.BOTH))
    # step 2 has no scrape: running/waiting/KV from the log there; the synthetic metrics carry
    # no token counter, so generation tokens/s come from the log in every step
    assert result.table["server_source"].tolist() == ["metrics+log", "metrics+log", "log", "metrics+log"]
    assert result.table["server_waiting"].tolist() == [0.0, 0.0, 0.0, 4.0]
    assert result.critical.users == SLOTS
    assert "metrics first, the log where metrics have no value" in result.critical.evidence[0]


def test_cli_prints_the_source_and_the_config_check(log_only_run, capsys):
    assert main([str(log_only_run), "--server-source", "log"]) == 0
    out = capsys.readouterr().out
    assert "Critical concurrency: 4 (throughput stops rising at 8 users)" in out
    assert "server data (log only)" in out
    assert "Batching settings took effect: yes, because" in out


def test_cli_rejects_a_bad_time_zone(log_only_run, capsys):
    assert main([str(log_only_run), "--server-log-tz", "Mars/Olympus"]) == 2
    assert "unknown time zone" in capsys.readouterr().err
