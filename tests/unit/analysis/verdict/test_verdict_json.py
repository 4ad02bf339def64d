"""``report/verdict.json`` against its shipped JSON Schema, and the run directory's client files."""

import json

import jsonschema
import pytest

from llm_locust.analysis.pipeline import analyze_run
from llm_locust.analysis.rundir.reader import CLIENT_LOAD_COLUMNS, RunDirError, load_run
from llm_locust.analysis.verdict.jsonout import SCHEMA_PATH
from llm_locust.analysis.verdict.types import BottleneckKind
from tests.analysis_factories import (
    T0,
    client_load_row,
    scenario_ladder,
    step_spec,
    synthetic_ladder,
    write_client_load,
)

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)


def schema():
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def test_the_schema_is_valid_and_lists_exactly_the_kinds():
    jsonschema.Draft202012Validator.check_schema(schema())
    assert schema()["$defs"]["kind"]["enum"] == [k.value for k in BottleneckKind]


@pytest.mark.parametrize(
    "steps",
    [
        [step_spec(1), step_spec(2), step_spec(4), step_spec(8, fail_every=1, fail_e2e_ms=5.0)],
        [step_spec(1), step_spec(2, active=1), step_spec(4, active=1)],
        [step_spec(1), step_spec(2)],
    ],
)
def test_written_verdict_json_validates(tmp_path, steps):
    run = scenario_ladder(tmp_path / "run", steps)
    result = analyze_run(run)
    data = json.loads(result.paths.verdict_json.read_text(encoding="utf-8"))
    jsonschema.validate(data, schema())
    assert data["bottleneck"] == result.verdict.bottleneck.value
    assert data["critical_concurrency"] == result.verdict.critical_concurrency
    assert result.paths.errors_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_broken_verdict_json_fails_the_schema(tmp_path):
    result = analyze_run(synthetic_ladder(tmp_path / "run"))
    data = json.loads(result.paths.verdict_json.read_text(encoding="utf-8"))
    assert data["bottleneck"] == "scheduler_ceiling" and data["critical_concurrency"] == 4
    for broken in (
        {**data, "bottleneck": "slow"},
        {**data, "critical_concurrency": 4.5},
        {k: v for k, v in data.items() if k != "steps"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, schema())


def test_summary_starts_with_the_verdict(tmp_path):
    result = analyze_run(synthetic_ladder(tmp_path / "run"))
    text = result.paths.summary_md.read_text(encoding="utf-8")
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections[0] == "## Verdict"
    assert "**Bottleneck: `scheduler_ceiling`**" in text


def test_client_load_csv_is_an_optional_typed_frame(tmp_path):
    run = synthetic_ladder(tmp_path / "run")
    assert list(load_run(run).client_load.columns) == list(CLIENT_LOAD_COLUMNS)
    assert load_run(run).client_load.empty
    write_client_load(run, [client_load_row(T0 + 1.0, worker="w1", cpu_cores=0.5, open_streams=3)])
    frame = load_run(run).client_load
    assert frame.dtypes["cpu_cores"] == "float64" and frame.dtypes["open_streams"] == "int64"
    assert frame.iloc[0]["worker"] == "w1" and frame.iloc[0]["open_streams"] == 3
    write_client_load(run, [client_load_row(T0 + 1.0, cpu_cores=-1.0)])
    with pytest.raises(RunDirError, match="cpu_cores"):
        load_run(run)
    (run / "client_load.csv").write_text("t_s,worker\n1,w\n", encoding="utf-8")
    with pytest.raises(RunDirError, match="missing columns"):
        load_run(run)


def test_workers_lost_is_checked(tmp_path):
    run = synthetic_ladder(tmp_path / "run")
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**meta, "workers_lost": [{"worker": "w1"}]}))
    with pytest.raises(RunDirError, match="workers_lost"):
        load_run(run)
    lost = [{"worker": "w1", "lost_at_s": T0 + 65.0, "last_record_s": T0 + 64.0}]
    (run / "run.json").write_text(json.dumps({**meta, "workers_lost": lost}))
    result = analyze_run(run, write=False)
    # steps are [T0 + 20 k, T0 + 20 (k + 1)), windows from 5 s in; the worker's records stop at
    # 64 s and its users are back on the others by 65 + 10 s: only step 3 ([65, 80)) is hit
    assert list(result.table["valid"]) == [True, True, True, False, True]
    assert result.table.loc[3, "invalid_reason"] == (
        "worker w1 was lost 1.0 s before the window (its users were still moving to the workers left) "
        "(in-flight 8.00 of 8 target users)"  # the synthetic ladder keeps its users' requests in flight
    )
    # the server would have saturated at 8 users, the step the lost worker invalidated: the
    # client limited the run, so the server is not blamed
    assert result.verdict.bottleneck.value == "client"
