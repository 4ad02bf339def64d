"""Report files are replaced whole or left as they were (llm_locust/analysis/report/atomicwrite.py)."""

from __future__ import annotations

import pytest

from llm_locust.analysis.atomicwrite import write_text_atomic


def test_the_file_is_replaced_and_nothing_else_is_left(tmp_path):
    target = tmp_path / "summary.md"
    target.write_text("old analysis\n")
    assert write_text_atomic(target, "new analysis: é\n") == target
    assert target.read_bytes() == "new analysis: é\n".encode()
    assert [p.name for p in tmp_path.iterdir()] == ["summary.md"]


def test_a_write_that_fails_midway_leaves_the_earlier_file_whole(tmp_path):
    target = tmp_path / "summary.md"
    target.write_text("old analysis\n")
    text = "x" * 100_000 + "\ud800"  # a lone surrogate: UTF-8 refuses it after 100,000 characters
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(target, text)
    assert target.read_text() == "old analysis\n"  # not cut to the first 100,000 characters
    assert [p.name for p in tmp_path.iterdir()] == ["summary.md"]  # no temporary file left


def test_a_folder_that_cannot_take_the_file_raises_and_writes_nothing(tmp_path):
    with pytest.raises(OSError):
        write_text_atomic(tmp_path / "missing" / "steps.csv", "a,b\n")
    assert list(tmp_path.iterdir()) == []
