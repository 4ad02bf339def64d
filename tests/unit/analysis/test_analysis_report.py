"""End to end: run directory -> report/ files and the ``analyze`` command (llm_locust/analysis/pipeline.py,
llm_locust/analysis/analyzecmd.py)."""

import json
from pathlib import Path

import jsonschema
import pandas as pd
import pytest
from matplotlib.image import imread

from llm_locust.analysis import analyze_run
from llm_locust.analysis.analyzecmd import main
from llm_locust.analysis.verdict.jsonout import BASELINE_NOTE, SCHEMA_PATH
from tests.analysis_factories import T0, make_request, server_row, synthetic_ladder, write_run_dir

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def ladder_dir(tmp_path_factory) -> Path:
    return synthetic_ladder(tmp_path_factory.mktemp("ladder") / "run")


def _assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert path.stat().st_size > 20_000
    height, width = imread(path).shape[:2]
    assert width >= 800 and height >= 400


def test_analyze_run_writes_report(ladder_dir):
    result = analyze_run(ladder_dir)
    # min(c, 4) * 64 / D: flat from 4 to 8 users while 4 wait and TTFT jumps
    assert result.critical.users == 4.0
    assert result.critical.kneed_users == 4.0
    paths = result.paths
    assert paths.report_dir == ladder_dir / "report"
    for png in (paths.throughput_png, paths.latency_png, paths.timeline_png):
        _assert_png(png)
    steps = pd.read_csv(paths.steps_csv)
    assert steps["target_users"].tolist() == [1, 2, 4, 8, 16]
    assert steps["server_waiting"].tolist() == [0.0, 0.0, 0.0, 4.0, 12.0]
    summary = paths.summary_md.read_text()
    assert "**Critical concurrency: 4 (throughput stops rising at 8 users)**" in summary
    assert "sim-llama" in summary and "max_tokens=64" in summary
    assert "| step | users |" in summary
    assert "shape `ladder` 1, 2, 4, 8, 16 users, each step held 20 s (the first 5 s warm-up)" in summary
    for name in ("throughput.png", "latency.png", "timeline.png", "steps.csv"):
        assert f"({name})" in summary
    assert "kneed cross-check" in summary


def test_ladder_step_rates_by_hand(ladder_dir):
    # D(b) = 40 + 63 * (20 + 2b) ms; every completion carries 64 tokens
    table = analyze_run(ladder_dir, write=False).table
    service_ms = {1: 1426.0, 2: 1552.0, 4: 1804.0}
    for users, d_ms in service_ms.items():
        row = table[table["target_users"] == users].iloc[0]
        assert row["e2e_p50_ms"] == d_ms
        assert row["tpot_p50_ms"] == pytest.approx((d_ms - 40.0) / 63)
        assert row["client_inflight"] == pytest.approx(users)
    queued = table[table["target_users"] == 8].iloc[0]
    assert queued["ttft_p50_ms"] == pytest.approx(1804.0 + 40.0)


def test_cli_prints_table_verdict_and_paths(ladder_dir, capsys):
    assert main([str(ladder_dir)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["step", "users", "in-flight"]
    assert "Critical concurrency: 4 (throughput stops rising at 8 users)" in lines
    assert f"Throughput: {ladder_dir / 'report' / 'throughput.png'}" in lines
    assert f"Summary: {ladder_dir / 'report' / 'summary.md'}" in lines


def test_cli_thresholds_are_passed(ladder_dir, capsys):
    assert main([str(ladder_dir), "--ttft-growth", "100"]) == 0
    out = capsys.readouterr().out
    assert "Critical concurrency: not reached within the tested ladder; highest tested is 16" in out.splitlines()


def test_cli_without_server_metrics(tmp_path, capsys):
    run_dir = synthetic_ladder(tmp_path / "run", users=(1, 2, 4, 8), with_server=False)
    assert main([str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "Critical concurrency: 4 (throughput stops rising at 8 users)" in out
    assert "client data" in out


def test_cli_bad_run_dir_returns_2(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    assert main([str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "run.json" in err and "error" in err


def test_baseline_run(tmp_path):
    requests = [make_request(T0 + 2.0 * k, e2e_ms=1360.0, ttft_ms=100.0) for k in range(5)]
    run_dir = write_run_dir(tmp_path / "run", requests=requests, kind="baseline", steps=[(1, T0, T0 + 10.0)])
    result = analyze_run(run_dir)
    row = result.table.iloc[0]
    assert row["ttft_p50_ms"] == 100.0 and row["decode_tps_p50"] == pytest.approx(50.0)
    assert result.critical.users is None and result.critical.evidence[-1] == BASELINE_NOTE
    # one load level: no curve against concurrency, the timeline only
    assert result.paths.throughput_png is None and result.paths.latency_png is None
    assert sorted(p.name for p in (run_dir / "report").glob("*.png")) == ["timeline.png"]
    _assert_png(result.paths.timeline_png)
    assert "(throughput.png)" not in (run_dir / "report" / "summary.md").read_text()


def test_a_one_step_ladder_draws_no_curve_and_a_second_analysis_of_two_steps_does(tmp_path):
    requests = [make_request(T0 + 1.0 + k) for k in range(4)]
    run_dir = write_run_dir(tmp_path / "run", requests=requests, steps=[(2, T0, T0 + 10.0)])
    (run_dir / "report").mkdir()
    (run_dir / "report" / "throughput.png").write_bytes(b"stale")  # from an earlier analysis
    assert analyze_run(run_dir).paths.throughput_png is None
    assert not (run_dir / "report" / "throughput.png").exists()
    two = write_run_dir(tmp_path / "two", requests=requests + [make_request(T0 + 11.0 + k) for k in range(4)],
                        steps=[(2, T0, T0 + 10.0), (4, T0 + 10.0, T0 + 20.0)])  # fmt: skip
    result = analyze_run(two)
    _assert_png(result.paths.throughput_png)
    _assert_png(result.paths.latency_png)


def test_baseline_run_writes_a_verdict_json_stating_the_baseline(tmp_path, capsys):
    # 5 requests one at a time: TTFT 100 ms, E2E 1360 ms, 64 tokens -> TPOT (1360 - 100) / 63 = 20 ms
    requests = [make_request(T0 + 2.0 * k, e2e_ms=1360.0, ttft_ms=100.0) for k in range(5)]
    requests.append(make_request(T0 + 11.0, e2e_ms=5.0, ttft_ms=float("nan"), error_kind="http_5xx"))
    run_dir = write_run_dir(tmp_path / "run", requests=requests, kind="baseline", steps=[(1, T0, T0 + 12.0)])
    meta = json.loads((run_dir / "run.json").read_text())
    meta["shape"]["requests"] = 5
    (run_dir / "run.json").write_text(json.dumps(meta))
    assert main([str(run_dir)]) == 0
    out = capsys.readouterr().out
    written = json.loads((run_dir / "report" / "verdict.json").read_text())
    jsonschema.validate(written, json.loads(SCHEMA_PATH.read_text()))
    assert written["shape"] == "baseline" and written["bottleneck"] is None and written["critical_concurrency"] is None
    assert written["baseline"] == {"requests": 5, "failed": 0, "ttft_p50_ms": 100, "tpot_p50_ms": 20,
                                   "e2e_p50_ms": 1360, "decode_tps_p50": 50, "output_tokens_p50": 64}  # fmt: skip
    assert written["evidence"] == [] and written["steps"] == [] and "no concurrency verdict applies" in written["note"]
    assert "Baseline (5 requests, one at a time; 0 failed): median TTFT 100 ms" in out
    assert f"Verdict JSON: {run_dir / 'report' / 'verdict.json'}" in out
    assert "not reached within the tested ladder" not in out


def test_run_without_steps_uses_whole_run(tmp_path):
    requests = [make_request(T0 + 1.0), make_request(T0 + 3.0)]
    run_dir = write_run_dir(tmp_path / "run", requests=requests, kind="none", steps=[], ended_at_s=T0 + 10.0)
    result = analyze_run(run_dir)
    assert result.table["completed"].tolist() == [2]
    assert result.table["output_tps"].tolist() == [pytest.approx(12.8)]  # 128 tokens / 10 s
    assert result.critical.users is None
    assert result.paths.timeline_png.is_file()


def test_unclean_stop_is_analysed_and_said(tmp_path, capsys):
    # ended_at_s null and the last step open: the end is the last request's end (T0 + 13.0)
    requests = [make_request(T0 + 1.0), make_request(T0 + 3.0), make_request(T0 + 12.0)]
    run_dir = write_run_dir(tmp_path / "run", requests=requests, steps=[(1, T0, T0 + 10.0), (2, T0 + 10.0, None)])
    meta = json.loads((run_dir / "run.json").read_text())
    meta["ended_at_s"] = None
    (run_dir / "run.json").write_text(json.dumps(meta))
    assert main([str(run_dir)]) == 0
    out = capsys.readouterr().out
    note = "run ended without a clean stop; end taken from the last record (13.0 s after the start)"
    assert f"Note: {note}" in out.splitlines()
    assert note in (run_dir / "report" / "summary.md").read_text()
    steps = pd.read_csv(run_dir / "report" / "steps.csv")
    assert steps["completed"].tolist() == [2, 1]  # the last request, ending at the end, counts
    assert steps["window_s"].iloc[1] == pytest.approx(3.0)


@pytest.mark.parametrize("content", ["header", "empty"])
def test_no_requests_recorded(tmp_path, capsys, content):
    run_dir = write_run_dir(tmp_path / "run", requests=[], steps=[(1, T0, T0 + 10.0)])
    if content == "empty":
        (run_dir / "requests.csv").write_text("")
    assert main([str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("No verdict: no requests were recorded: ")
    assert "Critical concurrency" not in out
    summary = (run_dir / "report" / "summary.md").read_text()
    assert "**No verdict: no requests were recorded: " in summary
    assert "Critical concurrency:" not in summary
    assert not (run_dir / "report" / "throughput.png").exists()
    assert not (run_dir / "report" / "latency.png").exists()
    assert (run_dir / "report" / "timeline.png").is_file()


def test_all_requests_failed(tmp_path, capsys):
    def failed(t, kind, message, status=500):
        return {
            **make_request(T0 + t, e2e_ms=200.0, output_tokens=0, error_kind=kind),
            "error_message": message,
            "status_code": status,
        }

    requests = [
        failed(1.0, "http_5xx", "engine dead"),
        failed(2.0, "http_5xx", "later one"),
        failed(3.0, "connection_error", "connection refused", status=""),
        failed(11.0, "http_5xx", "again"),
    ]
    run_dir = write_run_dir(tmp_path / "run", requests=requests, steps=[(1, T0, T0 + 10.0), (2, T0 + 10.0, T0 + 20.0)])
    result = analyze_run(run_dir)
    assert result.exit_code == 1 and result.critical.users is None
    assert main([str(run_dir)]) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert ("No verdict: no successful request: cannot judge the critical concurrency (all 4 requests failed)") in lines
    assert "Critical concurrency" not in out
    # most frequent first; the example is the earliest message of the kind
    assert lines[lines.index("Errors by kind (one example message each):") + 1 :][:2] == [
        '  http_5xx: 3, e.g. "HTTP 500: engine dead"',
        '  connection_error: 1, e.g. "connection refused"',
    ]
    summary = (run_dir / "report" / "summary.md").read_text()
    assert '- http_5xx: 3, e.g. "HTTP 500: engine dead"' in summary
    assert "![throughput]" not in summary and "![timeline](timeline.png)" in summary


def test_shape_none_is_one_load_level(tmp_path, capsys):
    requests = [make_request(T0 + 1.0), make_request(T0 + 3.0)]
    run_dir = write_run_dir(tmp_path / "run", requests=requests, kind="none", steps=[], ended_at_s=T0 + 10.0)
    assert main([str(run_dir)]) == 0
    out = capsys.readouterr().out
    # in flight: 2 requests x 1 s over 10 s; 128 tokens / 10 s
    assert (
        "One load level: no ladder to judge (shape none: achieved concurrency 0.20 requests "
        "in flight, 12.8 output tokens/s)"
    ) in out.splitlines()
    assert "no measured throughput" not in out and "Critical concurrency" not in out
    report = run_dir / "report"
    assert not (report / "throughput.png").exists() and not (report / "latency.png").exists()
    _assert_png(report / "timeline.png")
    summary = (report / "summary.md").read_text()
    assert "**One load level: no ladder to judge" in summary
    assert "(throughput.png)" not in summary and "(latency.png)" not in summary


def test_timeline_title_mentions_steps_only_for_a_ladder(ladder_dir):
    from matplotlib.figure import Figure

    from llm_locust.analysis.report.plots import plot_timeline

    result = analyze_run(ladder_dir, write=False)
    for steps, title in (
        (result.run.steps, "Requests in flight over the run (shaded: ladder steps)"),
        (result.run.steps.iloc[0:0], "Requests in flight over the run"),
    ):
        ax = Figure().add_subplot()
        plot_timeline(
            ax, steps=steps, warmup_s=5.0, inflight=result.inflight, server=result.server, t0_s=result.run.started_at_s
        )
        assert ax.get_title() == title


def test_the_server_line_ends_with_the_run_not_a_scrape_interval_later(tmp_path):
    """The last scrape holds for up to a scrape interval (a step function); drawn unclipped, a
    baseline that ended 0.8 s after its last scrape showed the server busy 3 s past the end."""
    from matplotlib.figure import Figure

    from llm_locust.analysis.report.plots import plot_timeline

    requests = [make_request(T0 + 1.0 + 1.5 * k, e2e_ms=1360.0) for k in range(3)]
    server = [server_row(T0 + t, metric, value) for t, running in ((0.5, 1.0), (2.0, 1.0), (3.4, 1.0), (6.0, 0.0))
              for metric, value in (("vllm:num_requests_running", running), ("vllm:num_requests_waiting", 0.0))]  # fmt: skip
    run_dir = write_run_dir(tmp_path / "run", requests=requests, kind="baseline", steps=[(1, T0, T0 + 4.2)],
                            server=server, ended_at_s=T0 + 4.2, scrape_interval_s=3.0)  # fmt: skip
    result = analyze_run(run_dir, write=False)
    assert result.server["t_s"].max() > T0 + 4.2  # the series itself runs on past the end
    for end_s, last_x in ((result.run.ended_at_s, 4.2), (None, None)):
        ax = Figure().add_subplot()
        plot_timeline(ax, steps=result.run.steps, warmup_s=0.0, inflight=result.inflight, server=result.server,
                      t0_s=T0, end_s=end_s)  # fmt: skip
        running = next(line for line in ax.get_lines() if line.get_label().startswith("server running"))
        x, y = running.get_xdata(), running.get_ydata()
        assert ax.get_title() == "Requests in flight over the run (shaded: ladder steps)"  # the default
        if last_x is None:
            assert max(x) > 4.2  # unclipped, as before
        else:
            assert max(x) == pytest.approx(last_x) and y[-1] == 1.0  # busy until the end, not after


def test_summary_has_the_prorated_throughput_column(ladder_dir):
    summary = analyze_run(ladder_dir).paths.summary_md.read_text()
    assert "| out tok/s | out tok/s prorated | req/s |" in summary


def test_summary_workload_line_leaves_out_unset_keys_and_shortens_fingerprints():
    from llm_locust.analysis.pipeline import workload_text

    sha = "c5c324489f501f85176728810a916462967b846265fada33f267823fec8f6543"
    text = workload_text({"max_tokens": 64, "tokenizer": None, "prompt_set_sha256": sha, "timeouts_s": {"ttft": 900.0}})
    assert text == f"max_tokens=64, prompt_set_sha256={sha[:12]}, timeouts_s=(ttft=900.0)"
    assert workload_text({}) == "not recorded"
