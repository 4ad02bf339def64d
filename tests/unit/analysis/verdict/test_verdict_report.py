"""The verdict as printed (console block after the step table) and in ``summary.md``."""

from llm_locust.analysis.analyzecmd import print_result
from llm_locust.analysis.pipeline import analyze_run
from tests.analysis_factories import scenario_ladder, step_spec, synthetic_ladder


def test_console_block_follows_the_step_table(tmp_path, capsys):
    result = analyze_run(synthetic_ladder(tmp_path / "run"))
    print_result(result)
    out = capsys.readouterr().out.splitlines()
    table_end = out.index("")  # the step table is the first block
    assert out[0].startswith("step  users")
    bottleneck = out[table_end + 1]
    assert bottleneck.startswith("Bottleneck: scheduler_ceiling — at 8 users 4.00 requests wait")
    assert out[table_end + 2] == "  critical concurrency: 4"
    recs = out[out.index("Recommendations:") + 1 :]
    assert recs[0].startswith("  -> cap the client concurrency at the critical value, 4")
    assert "(because scheduler_ceiling); verify: rerun the same ladder" in recs[0]
    assert out.index("Recommendations:") < out.index("Critical concurrency: 4 (throughput stops rising at 8 users)")
    assert f"Verdict JSON: {result.paths.verdict_json}" in out
    assert f"Errors: {result.paths.errors_png}" in out


def test_invalid_steps_are_listed_and_marked_in_the_table(tmp_path, capsys):
    run = scenario_ladder(tmp_path / "run", [step_spec(1), step_spec(2), step_spec(4, active=3)])
    result = analyze_run(run)
    print_result(result)
    out = capsys.readouterr().out
    assert "Bottleneck: client — the load client was the limit from 4 users" in out
    assert "  step 2 (4 users) invalid: client in-flight 3.00 of 4 target users (75%)" in out
    header = out.splitlines()[0]
    assert header.endswith("valid") and out.splitlines()[3].endswith("NO")
    summary = result.paths.summary_md.read_text(encoding="utf-8")
    assert (
        "Steps left out of the verdict (the load client was the limit there, the run's stop cut them, or the server was unreachable):"
        in summary
    )
    steps_csv = result.paths.steps_csv.read_text(encoding="utf-8").splitlines()
    assert "valid" in steps_csv[0].split(",") and "invalid_reason" in steps_csv[0].split(",")
