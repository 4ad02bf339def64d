"""Report files written whole or not at all: a temporary file beside the target, then a rename.

A report is rewritten each time a run is analysed. Written in place, an analysis stopped
mid-write (Ctrl-C, a kill, a full disk) would leave ``summary.md`` or ``steps.csv`` cut short
under its own name, in place of the earlier analysis' good copy. :func:`os.replace` within one
folder is atomic on POSIX, so a reader sees the old file or the new one, never a part.
The PNGs do the same in :mod:`analysis.report.figures` (with their own sweep of what a killed
child left).
"""

from __future__ import annotations

import os
from pathlib import Path


def write_text_atomic(path: Path, text: str, *, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` through ``.<name>.<pid>.tmp`` in the same folder; returns ``path``.

    Raises
    ------
    OSError
        The folder cannot be written (the temporary file is removed; ``path`` is as it was).
    UnicodeEncodeError
        ``text`` cannot be encoded in ``encoding`` (likewise, nothing changed).
    """
    path = Path(path)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temp.write_text(text, encoding=encoding)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    return path
