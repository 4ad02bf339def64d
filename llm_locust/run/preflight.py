"""Before a run starts: where it writes, which locustfile it runs, whether the server answers.

Shared by ``llm-locust run`` (:mod:`llm_locust.cli`) and ``llm-locust demo``
(:mod:`llm_locust.run.demo`); nothing here imports the CLI.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import llm_locust.locustfiles
from llm_locust.analysis.schema import REQUESTS_CSV, RUN_JSON, SERVER_METRICS_CSV

LOCUSTFILES = Path(llm_locust.locustfiles.__file__).resolve().parent
"""The folder of the ready locustfiles (``llm_locust/locustfiles/``)."""

MASTER_LOG = "locust_master.log"
"""The Locust master's log in the run directory (written by :mod:`llm_locust.run.launcher`)."""


def default_run_dir(prefix: str = "run") -> Path:
    """``runs/<prefix>-YYYYmmdd-HHMMSS`` under the current folder, a folder that does not exist yet
    (``-2``, ``-3``, … appended when two runs start in the same second)."""
    base = Path("runs") / f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def run_dir_problem(run_dir: Path) -> str | None:
    """Why ``run_dir`` cannot take a new run (it holds one already), or None."""
    held = [name for name in (RUN_JSON, REQUESTS_CSV, SERVER_METRICS_CSV, MASTER_LOG) if (run_dir / name).exists()]
    if held:
        return f"--run-dir {run_dir} already holds a run ({', '.join(held)}): use a new directory"
    return None


def out_dir_problem(out: Path, flag: str = "--out") -> str | None:
    """Why ``out`` cannot take a new diagnosis (it is a file, or a folder that holds anything), or None.

    ``diagnose`` writes several run directories and an index under one folder: into a folder used
    before, its master would refuse to record (``requests.csv`` exists) while the earlier files
    were read back as the new round's, so any non-empty folder is refused before any load.

    >>> out_dir_problem(Path("/nonexistent/llm-locust-out")) is None
    True
    """
    if not out.exists():
        return None
    if not out.is_dir():
        return f"{flag} {out} is a file: give a new folder"
    held = sorted(p.name + ("/" if p.is_dir() else "") for p in out.iterdir())
    if held:
        shown = ", ".join(held[:4]) + (", …" if len(held) > 4 else "")
        return f"{flag} {out} already holds files ({shown}), an earlier run's: give a new folder (nothing was sent)"
    return None


def preflight_or_exit(
    host: str, *, model: str = "", api_key: str = "", prog: str = "llm-locust run", model_required: bool = True
) -> None:
    """GET HOST/v1/models before starting Locust: exit 2 with one line when the host is not an
    http(s) URL or ends with /v1, the server cannot be reached, ``model`` is not among the served
    models, or no ``model`` was given (and ``model_required``) and /v1/models names none.

    Raises
    ------
    SystemExit
        Status 2, after one ``<prog>: error: …`` line on stderr.
    """
    from llm_locust.client.models import preflight

    error, note = preflight(host, model=model, api_key=api_key, model_required=model_required)
    if error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        raise SystemExit(2)
    if note:
        print(f"{prog}: {note}", file=sys.stderr)
