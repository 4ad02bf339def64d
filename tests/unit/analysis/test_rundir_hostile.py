"""``llm-locust analyze`` on hostile run directories (issue 14): a file missing, empty or only a
header, columns and keys from a newer writer, a ``schema_version`` newer than this analysis.
Never a crash (exit 0, 1 or 2 with one clear line), never a silent wrong number (what remains is
analysed exactly as in the intact directory), nothing already measured lost.

The loader's own checks (a missing ``run.json`` or ``requests.csv``, a row cut mid-write, bytes
that are not UTF-8) are in ``test_analysis_rundir.py`` and ``test_rundir_partial_rows.py``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from llm_locust.analysis.analyzecmd import main
from tests.analysis_factories import synthetic_ladder

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

CLIENT_COLUMNS = ["step", "target_users", "completed", "output_tps", "request_rps", "ttft_p50_ms", "tpot_p50_ms",
                  "e2e_p50_ms", "errors"]  # fmt: skip
SERVER_COLUMNS = ["server_running", "server_waiting", "kv_usage_ratio"]


@pytest.fixture(scope="module")
def intact(tmp_path_factory) -> tuple[Path, pd.DataFrame]:
    """A synthetic ladder (batch ceiling 4) analysed as written: its directory and steps.csv."""
    run_dir = synthetic_ladder(tmp_path_factory.mktemp("intact") / "run", users=(1, 2, 4, 8), max_num_seqs=4)
    assert main([str(run_dir)]) == 0
    return run_dir, pd.read_csv(run_dir / "report" / "steps.csv")


def _copy(intact_dir: Path, tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(intact_dir, run_dir, ignore=shutil.ignore_patterns("report"))
    return run_dir


def _steps(run_dir: Path) -> pd.DataFrame:
    return pd.read_csv(run_dir / "report" / "steps.csv")


def test_no_server_metrics_keeps_every_client_figure(intact, tmp_path, capsys):
    run_dir = _copy(intact[0], tmp_path)
    (run_dir / "server_metrics.csv").unlink()

    assert main([str(run_dir)]) == 0

    result = _steps(run_dir)
    pd.testing.assert_frame_equal(result[CLIENT_COLUMNS], intact[1][CLIENT_COLUMNS])
    assert result[SERVER_COLUMNS].isna().all().all()  # not measured: NaN, never 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("content", ["", "HEADER\r\n"], ids=["empty file", "header only"])
def test_requests_csv_without_rows_is_no_verdict_and_the_server_side_is_kept(intact, tmp_path, capsys, content):
    run_dir = _copy(intact[0], tmp_path)
    header = (run_dir / "requests.csv").read_text().splitlines()[0]
    (run_dir / "requests.csv").write_text(content.replace("HEADER", header))

    code = main([str(run_dir)])

    out = capsys.readouterr().out
    assert code == 1
    assert "no requests were recorded: requests.csv has no rows" in out
    # the server's samples are still read and judged: the synthetic server ran at most 4
    assert "highest running 4" in out
    assert (run_dir / "report" / "summary.md").is_file()


def test_columns_and_keys_from_a_newer_writer_are_ignored(intact, tmp_path, capsys):
    run_dir = _copy(intact[0], tmp_path)
    requests = pd.read_csv(run_dir / "requests.csv", dtype=str, keep_default_na=False)
    requests.insert(3, "queue_ms", "12345")  # unknown, in the middle: read by name, never by position
    requests["gpu_joules"] = "-1"
    requests.to_csv(run_dir / "requests.csv", index=False)
    server = pd.read_csv(run_dir / "server_metrics.csv", dtype=str, keep_default_na=False)
    server.insert(0, "scrape_id", "x")
    server.to_csv(run_dir / "server_metrics.csv", index=False)
    meta = json.loads((run_dir / "run.json").read_text())
    meta["future"] = {"anything": [1, 2]}
    (run_dir / "run.json").write_text(json.dumps(meta))

    assert main([str(run_dir)]) == 0

    pd.testing.assert_frame_equal(_steps(run_dir), intact[1])
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("version", [2, 99, "1"])
def test_a_schema_version_this_analysis_does_not_know_is_refused_in_one_line(intact, tmp_path, capsys, version):
    """Refused, not warned about: a newer writer may have changed a column's unit or meaning, and
    reading it as version 1 could give a wrong number with no sign of it."""
    run_dir = _copy(intact[0], tmp_path)
    meta = json.loads((run_dir / "run.json").read_text())
    meta["schema_version"] = version
    (run_dir / "run.json").write_text(json.dumps(meta))

    assert main([str(run_dir)]) == 2

    err = capsys.readouterr().err.strip()
    assert err == (
        f"llm-locust analyze: error: {run_dir / 'run.json'}: unknown schema_version {version!r} "
        "(this analysis reads [1])"
    )
    assert not (run_dir / "report").exists()  # nothing half-written


def test_a_report_that_cannot_be_written_is_one_line_after_the_verdict_and_the_data_is_untouched(intact, tmp_path,
                                                                                                  capsys):  # fmt: skip
    """A file where the report's folder goes (as a read-only or full disk would refuse it): the
    analysis is still printed, then one line says which file could not be written (exit 2)."""
    run_dir = _copy(intact[0], tmp_path)
    (run_dir / "report").write_text("not a folder")
    before = {path.name: path.read_bytes() for path in run_dir.iterdir()}

    assert main([str(run_dir)]) == 2

    out, err = capsys.readouterr()
    assert err.strip() == f"llm-locust analyze: error: cannot write the report: {run_dir / 'report'}: File exists"
    assert "Critical concurrency: 4" in out and "Traceback" not in out + err
    assert "Summary:" not in out  # no file is named as written
    assert {path.name: path.read_bytes() for path in run_dir.iterdir()} == before


def test_run_prints_the_verdict_and_one_line_when_its_report_cannot_be_written(intact, tmp_path, capsys):
    from llm_locust.run.postrun import analyze_and_print

    run_dir = _copy(intact[0], tmp_path)
    (run_dir / "report").write_text("not a folder")

    code, result = analyze_and_print(run_dir, prog="llm-locust run")

    out, err = capsys.readouterr()
    assert code == 2 and result is not None and result.critical.users == 4
    assert err.strip() == f"llm-locust run: error: cannot write the report: {run_dir / 'report'}: File exists"
    assert "Critical concurrency: 4" in out
