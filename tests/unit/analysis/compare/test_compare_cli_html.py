"""``llm-locust compare``'s exit codes and output files, and the diagnosis page."""

from __future__ import annotations

import re

from analysis.compare import compare_rounds, write_comparison
from analysis.compare.cli import main
from analysis.compare.html import write_index
from tests.unit.analysis.compare.rounds_factory import ladder_round


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

    for href in re.findall(r'(?:href|src)="([^"]+)"', page):
        assert (tmp_path / "report" / href).exists(), href
    assert "Bottleneck: compute; critical concurrency: 4" in page
    assert "flat &lt;x&gt;" in page  # escaped
    assert "Attribution (round 2 vs round 1): compute_cost" in page
    assert "<script" not in page
