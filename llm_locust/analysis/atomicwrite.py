"""Report files written whole or not at all: a temporary file beside the target, then a rename.

A report is rewritten each time a run is analysed. Written in place, an analysis stopped
mid-write (Ctrl-C, a kill, a full disk) would leave ``summary.md``, ``steps.csv`` or a PNG cut
short under its own name, in place of the earlier analysis' good copy. :func:`os.replace` within
one folder is atomic on POSIX, so a reader sees the old file or the new one, never a part. The
PNGs (:mod:`llm_locust.analysis.report.figures`) are written the same way, and sweep what a killed forked
child left under :func:`temp_path`'s names.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def temp_path(path: Path, pid: int | str) -> Path:
    """Where process ``pid`` writes ``path`` before the rename: ``.<name>.<pid>.tmp`` beside it
    (``pid="*"``: the glob pattern of every process's)."""
    return path.with_name(f".{path.name}.{pid}.tmp")


def write_atomic(path: Path, write: Callable[[Path], object]) -> Path:
    """``write(temp)`` to :func:`temp_path` of this process, then rename it to ``path``; returns ``path``.

    Raises
    ------
    Exception
        What ``write`` or the rename raised (the temporary file is removed; ``path`` is as it was).
    """
    path = Path(path)
    temp = temp_path(path, os.getpid())
    try:
        write(temp)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    return path


def write_text_atomic(path: Path, text: str, *, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` whole or not at all (:func:`write_atomic`); returns ``path``.

    Raises
    ------
    OSError
        The folder cannot be written (the temporary file is removed; ``path`` is as it was).
    UnicodeEncodeError
        ``text`` cannot be encoded in ``encoding`` (likewise, nothing changed).
    """
    return write_atomic(path, lambda temp: temp.write_text(text, encoding=encoding))
