"""Bring your own server (issue 26, item 7): a format file is refused or read as it was meant.

- ``--server-log-format`` that reads a log, with no log followed, is refused before any load
  (it was silently ignored); with a ``[metrics]`` table it stands alone.
- A format file without ``[[log.series]]`` still reads the log (its config and batch lines):
  the whole log counted as absent, and the note advised ``--server-log-format``, which was given.
- A double-quoted TOML pattern (``"\\d+"``) gets the hint to write it in single quotes.
"""

from __future__ import annotations

import argparse

import pytest

from llm_locust.analysis.server.userformat import UserFormatError, load_user_format
from llm_locust.client.protocols.genericformat import FormatError, load_format
from llm_locust.options import validate_options
from llm_locust.run.diagnose import check_log_format
from tests.serverlog_helpers import parse, unix

LOG_ONLY = "[[log.series]]\npattern = 'batch size=(?P<running>\\d+)'\n"
WITH_METRICS = LOG_ONLY + '[metrics]\nrunning = "deepinfer_batch_size"\n'


def options(**given) -> argparse.Namespace:
    return argparse.Namespace(**{"server_log": "", "server_log_cmd": "", **given})


def test_a_log_format_without_a_log_is_refused(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(LOG_ONLY)
    with pytest.raises(ValueError, match="reads a server log, and none is followed: add --server-log PATH"):
        validate_options(options(server_log_format=str(path)))
    validate_options(options(server_log_format=str(path), server_log="server.log"))
    validate_options(options(server_log_format=str(path), server_log_cmd="kubectl logs -f x"))
    with pytest.raises(ValueError, match="none is followed"):
        check_log_format(argparse.Namespace(server_log=None), ["--server-log-format", str(path)])
    check_log_format(argparse.Namespace(server_log="s.log"), ["--server-log-format", str(path)])


def test_a_format_file_with_a_metrics_table_stands_alone(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(WITH_METRICS)
    validate_options(options(server_log_format=str(path)))
    check_log_format(argparse.Namespace(server_log=None), ["--server-log-format", str(path)])


def test_a_format_file_without_series_still_reads_the_log():
    fmt = load_user_format(
        "name = 'mine'\n[log]\n"
        "timestamp = '^(?P<ts>\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d(?:\\.\\d+)?)'\n"
        "[[log.config]]\npattern = 'max_batch_size=(?P<batch_ceiling>\\d+)'\n"
        "[[log.batches]]\npattern = 'batch size=(?P<batch_size>\\d+), wait=(?P<batch_wait_ms>[\\d.]+)ms'\n",
        source="mine.toml",
    )
    lines = ["2025-11-30 12:00:00.000 INFO config: max_batch_size=8",
             "2025-11-30 12:00:01.000 INFO scheduler: batch size=3, wait=12.5ms, queue=0"]  # fmt: skip
    result = parse(lines, reference_s=unix(2025, 11, 30, 12, 0, 0), user_format=fmt)
    assert result.family.value == "generic"
    assert result.config.batch_ceiling == 8
    assert not any("--server-log-format" in note for note in result.notes)


def test_a_format_file_with_no_log_pattern_says_so():
    fmt = load_user_format('[metrics]\nrunning = "x_running"\n', source="metrics-only.toml")
    result = parse(["nothing to see"], reference_s=unix(2025, 11, 30, 12, 0, 0), user_format=fmt)
    assert result.family is None
    assert any("metrics-only.toml has no [[log.series]]" in note for note in result.notes)


def test_a_double_quoted_pattern_gets_the_single_quote_hint(tmp_path):
    with pytest.raises(UserFormatError, match="write regular expressions in single quotes"):
        load_user_format('[[log.series]]\npattern = "batch size=(?P<running>\\d+)"\n', source="dq.toml")
    path = tmp_path / "protocol.toml"
    path.write_text('[request]\npath = "/generate\\d"\n')
    with pytest.raises(FormatError, match="write regular expressions in single quotes"):
        load_format(path)


def test_the_format_file_is_checked_against_the_log():
    fmt = load_user_format(
        "name = 'mine'\n[log]\n"
        "[[log.series]]\npattern = 'batch size=(?P<running>\\d+)'\n"
        "[[log.series]]\npattern = 'queue depth=(?P<waiting>\\d+)'\n"  # this server never logs it
        "[[log.batches]]\npattern = 'started size=(?P<batch_size>\\d+)'\n"
        "[[log.config]]\npattern = 'slots=(?P<batch_ceiling>\\d+)'\n"  # nor this
        "[[log.errors]]\nkind = 'queue_full'\npattern = 'queue full'\n"
        "[[log.errors]]\nkind = 'timeout'\npattern = 'timed out'\n",  # no request timed out
        source="mine.toml",
    )
    lines = [f"2025-11-30 12:00:0{k}.000 batch size={k}" for k in range(3)]
    lines += ["2025-11-30 12:00:04.000 started size=2", "2025-11-30 12:00:05.000 WARN queue full"] * 2
    result = parse(lines, reference_s=unix(2025, 11, 30, 12, 0, 0), user_format=fmt)
    assert result.format_check[0] == (
        "mine.toml: lines of server.log matched per pattern: [[log.series]] #1 3, #2 0; [[log.batches]] #1 2; "
        "[[log.config]] #1 0; [[log.errors]] #1 2 (queue_full), #2 0 (timeout)"
    )
    warned = result.format_check[1:]
    assert len(warned) == 2  # an error pattern without a line is a run without that failure: no warning
    assert warned[0].startswith("warning: mine.toml [[log.series]] #2 matched no line of server.log")
    assert "queue depth=" in warned[0]
    assert warned[1].startswith("warning: mine.toml [[log.config]] #1 matched no line")


def test_a_format_file_of_error_patterns_only_is_checked_too():
    fmt = load_user_format("[[log.errors]]\nkind = 'rejected'\npattern = 'limiting'\n".replace("[[", "[log]\n[[", 1))
    result = parse(["no stamp here, limiting connections", "other"], user_format=fmt)
    assert result.family is None  # no parser for this log, yet the file was checked against it
    assert result.format_check == (
        "format file: lines of server.log matched per pattern: [[log.errors]] #1 1 (rejected)",
    )
