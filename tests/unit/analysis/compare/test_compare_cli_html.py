"""``llm-locust compare``'s exit codes and output files, and the diagnosis page."""

from __future__ import annotations

import json
import re

import pytest

from llm_locust.analysis.compare import compare_rounds, write_comparison
from llm_locust.analysis.compare.comparecmd import main
from llm_locust.analysis.compare.html import write_index
from tests.unit.analysis.compare.rounds_factory import ladder_round

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)


def test_cli_writes_and_prints_the_table(tmp_path, capsys):
    a = ladder_round(tmp_path / "a")
    b = ladder_round(tmp_path / "b", slowdown=2.0, labels={"build": "slow"})

    assert main([str(a), str(b), "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert "Attribution (round 2 vs round 1): compute_cost" in out
    assert re.search(r"^tok/s @4 +\S+ +\| +\S+", out, re.M), out
    assert (tmp_path / "cmp" / "rounds.csv").exists()


def test_cli_refuses_with_exit_2(tmp_path, capsys):
    a = ladder_round(tmp_path / "a")
    assert main([str(a)]) == 2
    assert "two rounds or more" in capsys.readouterr().err
    assert main([str(a), str(tmp_path / "missing")]) == 2
    assert "neither a run directory" in capsys.readouterr().err
    # the same folder twice (also spelt another way) would read as "no difference"
    b = ladder_round(tmp_path / "b", slowdown=2.0)
    assert main([str(a), str(b), str(tmp_path / "b" / ".." / "a")]) == 2
    assert "is given twice (rounds 1 and 3)" in capsys.readouterr().err


def test_index_links_every_file_it_names(tmp_path):
    for name, slowdown in (("round-a", 1.0), ("round-b", 2.0)):
        run = ladder_round(tmp_path / name / "ladder", slowdown=slowdown)
        report = run / "report"
        report.mkdir()
        (report / "summary.md").write_text("# summary\n")
        (report / "throughput.png").write_bytes(b"\x89PNG\r\n\x1a\n")
        (report / "verdict.json").write_text(
            '{"bottleneck": "compute", "critical_concurrency": 4, '
            '"evidence": [{"text": "flat <x>", "holds": true}], '
            '"recommendations": []}'
        )
    comparison = write_comparison(compare_rounds([tmp_path / "round-a", tmp_path / "round-b"]), tmp_path / "compare")

    page = write_index(
        tmp_path, [("a", tmp_path / "round-a", []), ("b", tmp_path / "round-b", ["a note"])], comparison
    ).read_text()

    for href in re.findall(r'(?:href|src)="([^"#]+)"', page):
        assert (tmp_path / "report" / href).exists(), href
    for anchor in re.findall(r'href="#([^"]+)"', page):
        assert f'id="{anchor}"' in page, anchor
    assert "Bottleneck: <code>compute</code>" in page
    assert "<b>Critical concurrency:</b> 4 users" in page
    assert "flat &lt;x&gt;" in page  # escaped
    assert "Attribution (round 2 vs round 1): <code>compute_cost</code>" in page
    assert "<script" not in page


def _verdict(report, verdict):
    report.mkdir(parents=True, exist_ok=True)
    (report / "verdict.json").write_text(json.dumps(verdict))


def test_diagnose_page_shows_the_ladder_verdict_not_the_baselines(tmp_path):
    # the baseline's verdict.json (llm_locust/analysis/verdict/verdict.schema.json) has "bottleneck": null; the
    # page once showed it first as "Bottleneck: None; critical concurrency: None"
    folder = tmp_path / "round-a"
    _verdict(
        folder / "baseline" / "report",
        {"schema": 1, "shape": "baseline", "critical_concurrency": None, "bottleneck": None, "secondary": [],
         "evidence": [], "recommendations": [], "steps": [],
         "baseline": {"requests": 10, "failed": 0, "ttft_p50_ms": 24.0, "tpot_p50_ms": 21.0},
         "note": "single-request baseline"},
    )  # fmt: skip
    _verdict(
        folder / "ladder" / "report",
        {"schema": 1, "critical_concurrency": None, "bottleneck": "none", "secondary": [],
         "evidence": [{"rule": "none", "kind": "none", "holds": True, "text": "no saturation up to 8 users"}],
         "recommendations": [{"change": "add ladder steps 16, 32", "flag": "--ladder", "because": "none",
                              "verify": "rerun with the longer ladder"}],
         "steps": [{"users": u, "valid": True, "invalid_reason": ""} for u in (1, 2, 4)]
         + [{"users": 8, "valid": False, "invalid_reason": "too short: 3 completions"}]},
    )  # fmt: skip

    page = write_index(tmp_path, [("a", folder, [])], None).read_text()

    text = re.sub(r"<[^>]+>", "", page)
    assert "None" not in text and "nan" not in text.split()
    first = text.index("Bottleneck: ")
    assert text[first:].startswith("Bottleneck: none"), text[first : first + 40]
    assert text.index("Round a: ladder") < text.index("Round a: single-request baseline")
    # a verdict with no critical value names the highest step, never None
    assert "critical concurrency not reached up to 8 users" in text
    assert "8 users: too short: 3 completions" in text  # the step the verdict could not use
    assert "verify: rerun with the longer ladder" in text
    assert "10 requests, one at a time: TTFT p50 24.0 ms, TPOT p50 21.0 ms" in text


def test_an_unknown_kind_is_shown_as_it_is(tmp_path):
    folder = tmp_path / "round-a"
    _verdict(
        folder / "ladder" / "report",
        {"schema": 1, "critical_concurrency": 4, "bottleneck": "undetermined", "secondary": [],
         "evidence": [{"rule": "undetermined", "kind": "undetermined", "holds": True,
                       "text": "kv_cache or compute: measure the KV usage"}],
         "recommendations": [], "steps": [{"users": 4, "valid": True, "invalid_reason": ""}]},
    )  # fmt: skip
    text = re.sub(r"<[^>]+>", "", write_index(tmp_path, [("a", folder, [])], None).read_text())
    assert "Bottleneck: undetermined" in text
    assert "Why: kv_cache or compute: measure the KV usage" in text
