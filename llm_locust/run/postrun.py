"""After Locust exits: the one post-run sequence of ``llm-locust run`` and ``llm-locust demo``.

:func:`finish_run_result` does, in order: stop when Locust failed before recording anything;
print the master's client summary (``client_report.json``); print the users that failed and,
when no request succeeded, what the failures were; analyse the run directory
(:func:`llm_locust.analysis.pipeline.analyze_run`) and print the result; choose the exit code
(:func:`finish_run`). Nothing here imports :mod:`llm_locust.cli`.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from llm_locust.analysis.schema import CLIENT_REPORT, REQUESTS_CSV, RUN_JSON
from llm_locust.preload import preload_modules
from llm_locust.run.preflight import MASTER_LOG

if TYPE_CHECKING:
    from llm_locust.analysis.pipeline import AnalysisResult


def failure_summary(run_dir: Path, *, examples: int = 3) -> str | None:
    """When no request of the run succeeded: "all N requests failed" with the commonest error kinds
    and one example message each (from ``requests.csv``); None when some succeeded."""
    try:
        with open(run_dir / REQUESTS_CSV, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        rows = []
    if any(not row.get("error_kind") for row in rows):
        return None
    if not rows:
        return "no request was recorded"
    kinds = Counter(row["error_kind"] for row in rows)
    example: dict[str, str] = {}
    for row in rows:
        example.setdefault(row["error_kind"], row.get("error_message", ""))
    stopped = kinds.get("interrupted", 0)
    lines = [
        f"no request succeeded: {len(rows)} requests, {len(rows) - stopped} failed, {stopped} interrupted by the "
        "test's stop (no failure):"
        if stopped
        else f"all {len(rows)} requests failed:"
    ]
    for kind, count in kinds.most_common(examples):
        lines.append(f"  {count} x {kind}: {example[kind][:200]}")
    return "\n".join(lines)


def _user_errors(run_dir: Path) -> list[dict]:
    try:
        return json.loads((run_dir / RUN_JSON).read_text()).get("user_errors") or []
    except (OSError, ValueError, AttributeError):
        return []


_LOG_LEVEL = re.compile(r"^\[[^\]]*\] [^/]*/(ERROR|CRITICAL)/")


def master_failure_lines(run_dir: Path, *, limit: int = 6) -> list[str]:
    """What the Locust master's log (``locust_master.log``) says of why it failed, for the console.

    The lines taken, in order, the last ``limit`` of them: log records at ERROR or CRITICAL
    (Locust's ``[time] host/LEVEL/logger: message`` format), argparse's ``prog: error: …`` line
    (an unknown flag), and the last line of each traceback (``FileExistsError: …``). An empty
    list when the log is missing or says none of these.
    """
    try:
        text = (run_dir / MASTER_LOG).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    found: list[str] = []
    in_traceback = False
    for line in text.splitlines():
        if line.startswith("Traceback (most recent call last)"):
            in_traceback = True
            continue
        if in_traceback:
            if not line or line[0].isspace():
                continue
            in_traceback = False
            if not line.startswith("During handling"):
                found.append(line.strip())
            continue
        if _LOG_LEVEL.match(line) or ": error: " in line:
            found.append(line.strip())
    unique = list(dict.fromkeys(found))
    return unique[-limit:]


def report_master_failure(run_dir: Path, code: int, prog: str) -> None:
    """One line saying the Locust run failed (its exit code, its log), then the master's own
    words (:func:`master_failure_lines`), on stderr."""
    print(f"{prog}: the Locust run failed (exit {code}); its log: {run_dir / MASTER_LOG}", file=sys.stderr)
    for line in master_failure_lines(run_dir):
        print(f"  {line[:300]}", file=sys.stderr)


def report_outcome(run_dir: Path, prog: str = "llm-locust run") -> bool:
    """After a run: print the users that failed (e.g. in ``on_start``) and, when no request
    succeeded, the failure summary, on stderr. Returns True when no request succeeded."""
    for error in _user_errors(run_dir):
        print(f"{prog}: a user failed ({error.get('count', 1)} x): {error.get('msg', '')}", file=sys.stderr)
    summary = failure_summary(run_dir)
    if summary:
        print(f"{prog}: {summary}", file=sys.stderr)
        return True
    return False


@contextmanager
def _locust_unpatched():
    """Import Locust (if a module needs it) without gevent's monkey-patching: this process only
    launches and reads; patching after ``ssl`` was imported breaks it (``RecursionError``)."""
    skip = "LOCUST_SKIP_MONKEY_PATCH"
    previous = os.environ.get(skip)
    os.environ[skip] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(skip, None)
        else:
            os.environ[skip] = previous


POST_RUN_MODULES = ("llm_locust.analysis.pipeline", "llm_locust.analysis.analyzecmd")
"""What the analysis at the end of a run imports (pandas, matplotlib: seconds on a busy machine)."""


def preload_post_run(*, analyze: bool = True) -> None:
    """Start importing the post-run modules during the run (:func:`llm_locust.preload.preload_modules`).

    The launcher only waits for the Locust processes while the test runs; importing pandas,
    matplotlib and the analysis then takes that time out of the wait between the test's end and
    the report. ``analyze=False`` (``--no-analyze``): the client report's module only. That
    module imports Locust, so it is preloaded only once this process has (without gevent's
    patching, :func:`_locust_unpatched`).
    """
    modules = POST_RUN_MODULES if analyze else ()
    if "locust" in sys.modules:
        modules = ("llm_locust.master.clientreport", *modules)
    preload_modules(modules)


def print_client_report(run_dir: Path) -> None:
    """The master's end-of-run client summary (``client_report.json``), when it wrote one."""
    with _locust_unpatched():  # clientreport's module imports Locust (worker-loss bookkeeping)
        from llm_locust.master.clientreport import format_summary

    def nulls_as_nan(obj: dict) -> dict:
        return {key: math.nan if value is None else value for key, value in obj.items()}

    try:
        report = json.loads((run_dir / CLIENT_REPORT).read_text(), object_hook=nulls_as_nan)
    except (OSError, ValueError):
        return
    try:
        started_at_s = float(json.loads((run_dir / "run.json").read_text())["started_at_s"])
    except (OSError, ValueError, KeyError, TypeError):
        started_at_s = None  # no per-worker table without the run's start
    print(format_summary(report, started_at_s))


def analyze_and_print(run_dir: Path, *, prog: str, fail_on: tuple = ()) -> tuple[int, AnalysisResult | None]:
    """Analyse ``run_dir`` with the default settings (and the ``fail_on`` thresholds) and print
    what ``llm-locust analyze`` prints.

    Returns
    -------
    (exit_code, result)
        ``result.exit_code`` (3 when a threshold failed) and the result; ``(2, None)`` when the run
        directory cannot be read or a threshold names a step the run has not (one line on stderr).
    """
    from llm_locust.analysis.analyzecmd import print_result
    from llm_locust.analysis.pipeline import ReportWriteError, analyze_run
    from llm_locust.analysis.rundir.reader import RunDirError

    try:
        result = analyze_run(run_dir, fail_on=fail_on)
    except (RunDirError, ValueError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2, None
    except ReportWriteError as exc:  # the verdict is printed; the files could not be written
        print_result(exc.result)
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2, exc.result
    print_result(result)
    return result.exit_code, result


def recorded_requests(run_dir: Path) -> int:
    """Data rows of ``run_dir/requests.csv`` (0 when it is missing)."""
    try:
        with open(run_dir / REQUESTS_CSV, "rb") as f:
            return max(0, sum(1 for _ in f) - 1)
    except OSError:
        return 0


def finish_run_result(
    run_dir: Path,
    code: int,
    *,
    exit_code_on_error: int = 1,
    analyze: bool = True,
    prog: str = "llm-locust run",
    fail_on: tuple = (),
) -> tuple[int, AnalysisResult | None]:
    """After the Locust processes ended: print the client report, analyse, choose the exit code.

    The client report and the analysis are written whenever a request was recorded, whatever
    the master's exit code. The exit code, first that applies: 124/130/143 when the run was
    stopped (``--timeout-s``, Ctrl-C, SIGTERM); Locust's own code when it failed (other than
    ``--exit-code-on-error``) before recording anything; 1 when no request succeeded; Locust's
    nonzero code (its ``--exit-code-on-error``, 1 by default, when a request failed or a user
    raised; 2 for an error inside Locust); else the analysis' (0, or 2 for an unreadable run
    directory). With ``fail_on`` thresholds they replace ``--exit-code-on-error``: the run that
    was measured exits 3 when one failed (:data:`llm_locust.analysis.thresholds.EXIT_THRESHOLD_FAILED`),
    else 0, whether or not some requests failed (``error_rate`` is the threshold for that).

    Parameters
    ----------
    run_dir : Path
        The run directory.
    code : int
        :func:`~llm_locust.run.launcher.run_locust`'s return value.
    exit_code_on_error : int
        The run's ``--exit-code-on-error`` (what the master returns when a request failed).
    analyze : bool
        False for ``--no-analyze``.
    prog : str
        Prefix of the lines printed on stderr (``llm-locust run``, ``llm-locust demo``).
    fail_on : tuple of llm_locust.analysis.thresholds.Threshold
        ``--fail-on`` thresholds, checked on the analysis.

    Returns
    -------
    (exit_code, result)
        The exit code, and the analysis (None when there was none).
    """
    from llm_locust.run.launcher import STOPPED_CODES

    stopped = code in STOPPED_CODES
    if code and not stopped and code != exit_code_on_error and not recorded_requests(run_dir):
        report_master_failure(run_dir, code, prog)
        return code, None
    print_client_report(run_dir)
    none_succeeded = report_outcome(run_dir, prog)
    analyzed, result = 0, None
    if analyze and not none_succeeded:
        analyzed, result = analyze_and_print(run_dir, prog=prog, fail_on=fail_on)
    if stopped:
        return code, result
    if none_succeeded:
        return 1, result
    if fail_on and (not code or code == exit_code_on_error):
        return analyzed, result
    if code:
        if code == exit_code_on_error:
            why = "some requests failed or a user raised (Locust's --exit-code-on-error)"
            print(f"{prog}: locust exited with code {code}: {why}", file=sys.stderr)
        else:
            report_master_failure(run_dir, code, prog)
        return code, result
    return analyzed, result


def finish_run(
    run_dir: Path,
    code: int,
    *,
    exit_code_on_error: int = 1,
    analyze: bool = True,
    prog: str = "llm-locust run",
    fail_on: tuple = (),
) -> int:
    """The exit code of :func:`finish_run_result` (``llm-locust run``'s)."""
    return finish_run_result(
        run_dir, code, exit_code_on_error=exit_code_on_error, analyze=analyze, prog=prog, fail_on=fail_on
    )[0]
