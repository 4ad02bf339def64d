"""The exit code ``llm-locust run`` gives after the Locust processes ended (issue 14): a stop's code
wins, then "nothing succeeded" (1), then Locust's own nonzero code (``--exit-code-on-error``),
then the analysis'. Checked on hand-written run directories, analysis left out."""

from __future__ import annotations

import csv

import pytest

from llm_locust.client.record import CSV_COLUMNS
from llm_locust.run.postrun import finish_run

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)


def write_requests(run_dir, kinds: list[str]) -> None:
    run_dir.mkdir(exist_ok=True)
    with open(run_dir / "requests.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for kind in kinds:
            writer.writerow({"error_kind": kind, "error_message": "busy" if kind else ""})


@pytest.mark.parametrize(
    ("kinds", "code", "on_error", "expected", "stderr_has"),
    [
        (["", "http_429"], 0, 1, 0, None),
        (["", "http_429"], 1, 1, 1, "locust exited with code 1: some requests failed"),
        (["", "http_429"], 3, 3, 3, "locust exited with code 3: some requests failed"),
        (["", "http_429"], 2, 1, 2, "the Locust run failed (exit 2)"),
        (["", "http_429"], 143, 1, 143, None),
        (["http_429", "http_429"], 1, 1, 1, "all 2 requests failed"),
        (["http_429", "http_429"], 130, 1, 130, "all 2 requests failed"),
        ([], 2, 1, 2, "the Locust run failed (exit 2)"),
        ([], 124, 1, 124, "no request was recorded"),
    ],
)
def test_exit_code_precedence(tmp_path, capsys, kinds, code, on_error, expected, stderr_has):
    run_dir = tmp_path / "run"
    write_requests(run_dir, kinds)
    assert finish_run(run_dir, code, exit_code_on_error=on_error, analyze=False) == expected
    err = capsys.readouterr().err
    if stderr_has is None:
        assert err == ""
    else:
        assert stderr_has in err


@pytest.mark.parametrize(
    ("gate", "code", "expected"),
    [
        ("error_rate>0.5", 1, 3),  # Locust said "some failed" (1): the threshold decides, and fails
        ("error_rate>0.99", 1, 0),  # ... and passes: --exit-code-on-error is replaced by the thresholds
        ("error_rate>0.5", 0, 3),
        ("error_rate>0.5", 2, 2),  # an error inside Locust is still reported as such
        ("error_rate>0.5", 143, 143),  # a stop's code wins
    ],
)
def test_thresholds_replace_exit_code_on_error(tmp_path, capsys, gate, code, expected):
    from llm_locust.analysis.thresholds import parse_thresholds
    from tests.analysis_factories import scenario_ladder, step_spec

    run_dir = scenario_ladder(
        tmp_path / "run", [step_spec(1), step_spec(2, fail_every=1, fail_e2e_ms=500.0)], dwell_s=10.0
    )  # fmt: skip
    result = finish_run(run_dir, code, exit_code_on_error=1, fail_on=parse_thresholds([gate]))
    assert result == expected
    if expected == 3:
        assert f"FAILED {gate}: error_rate over the run is" in capsys.readouterr().out
