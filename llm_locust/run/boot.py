"""A Locust process started before its command line is known: the imports first, the flags later.

``llm-locust run`` starts its master and local workers with this module at its own start
(``python -m llm_locust.run.boot``), before it has checked its flags and the server. Each one
imports what every Locust process imports (Locust, with gevent's patching, as ``python -m
locust`` does; with ``--plugin``, also llm-locust's plugin and user class, which the ready
locustfiles import) and then waits on its standard input for one line from the launcher (a JSON
object, :func:`go_message`):

- ``argv``: the Locust command line (what follows ``python -m locust``);
- ``log``: the file its output goes to (created, truncated, as ``open(log, "w")``);
- ``api_key``: absent, or the key to put in its environment (:data:`llm_locust.auth.API_KEY_ENV`).

Then it points its standard output and error at the log, its standard input at ``/dev/null``,
sets ``sys.argv`` and runs ``locust.main.main()``, Locust's own console entry point: from there
it is the process ``python -m locust ARGV`` would have been, its imports done while the launcher
checked the run (they were most of the time to the first request: ~0.7 s of CPU per process).
While it imports, the installed packages' entry points are read once (:func:`entry_points_read_once`):
gevent's ``patch_all`` looks its plugins up 25 times, and each lookup read every package's
``entry_points.txt`` (~0.15 s of a process's import).

The master's line may also carry ``workers``: a list of ``{"argv", "log"}`` objects. The master's
process then forks one child per entry before it starts (:func:`os.fork`, gevent's once Locust has
patched it, as Locust's own ``--processes`` does), each of which becomes ``python -m locust ARGV``
with its own log, and it writes their process ids to its standard output as one JSON line
(``{"workers": [PID, ...]}``) before it points that at its log (fewer ids when a fork failed:
the launcher starts the others as processes of its own). So one process imports Locust for
the master and its local workers (~0.7 s of CPU, once instead of once per process, on a machine
whose two cores the launcher's own start also needs); the children share its memory pages until
they write to them.

An empty standard input (the launcher refused the run, or ended) ends it with status 0, having
sent nothing and written nothing. When an import fails, it still waits for the line and then
executes ``python -m locust ARGV`` itself, so the error lands in the log as it would have.

Why own code: Locust has no "start now, read the flags later" mode; its entry point reads
``sys.argv``, which is all this module sets.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from llm_locust.auth import API_KEY_ENV  # os and sys only: nothing before Locust's patching
from llm_locust.parentdeath import PARENT_ENV, end_with_parent  # os, signal, sys: nothing gevent patches

PRELOADED = ("llm_locust.plugin", "llm_locust.client.user")
"""What ``--plugin`` imports before the command line: what every ready locustfile imports
(``llm_locust/locustfiles/*.py``). A user's own locustfile gets Locust alone (the plugin registers
llm-locust's options and recorder, which such a locustfile may not want)."""


def go_message(argv: list[str], log: str, api_key: str | None = None, workers=()) -> bytes:
    """The launcher's line to a booted process (see the module docstring).

    ``workers``: ``(argv, log)`` pairs of the workers the process forks before it starts (a
    master's line only; none by default).

    >>> go_message(["-f", "x.py", "--worker"], "w.log")
    b'{"argv": ["-f", "x.py", "--worker"], "log": "w.log"}\\n'
    """
    message: dict = {"argv": list(argv), "log": str(log)}
    if api_key is not None:
        message["api_key"] = api_key
    if workers:
        message["workers"] = [
            {"argv": list(worker_argv), "log": str(worker_log)} for worker_argv, worker_log in workers
        ]
    return json.dumps(message).encode() + b"\n"


def _is_command(message) -> bool:
    return (
        isinstance(message, dict)
        and isinstance(message.get("argv"), list)
        and all(isinstance(arg, str) for arg in message["argv"])
        and isinstance(message.get("log"), str)
    )


def read_go(stream) -> dict | None:
    """The launcher's line from the binary ``stream``, or None when it sent none (end of input).

    Raises
    ------
    ValueError
        A line that is not a JSON object with a list ``argv`` and a string ``log``.
    """
    line = stream.readline()
    if not line.strip():
        return None
    message = json.loads(line)
    workers = message.get("workers", []) if isinstance(message, dict) else None
    if not (_is_command(message) and isinstance(workers, list) and all(_is_command(w) for w in workers)):
        raise ValueError(f"not a boot message: {line[:200]!r}")
    return message


def _redirect(log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


@contextmanager
def entry_points_read_once() -> Iterator[None]:
    """While entered, :func:`importlib.metadata.entry_points` reads the installed distributions'
    entry points on its first call only and answers every call from that one reading.

    gevent's ``patch_all`` (run by ``import locust``) looks up its plugins' entry points
    (``gevent.events.notify_and_call_entry_points``) before and after patching each module: 25
    calls, each of which lists every installed distribution and reads its ``entry_points.txt``
    (2,300 file reads with 92 packages installed; ~0.15 s of the ~0.75 s the imports take). The
    answers are the same objects a fresh reading gives, selected the same way
    (``EntryPoints.select``), as long as no package is installed or removed meanwhile. gevent
    imports :mod:`importlib.metadata` itself before it patches anything, so importing it here
    first changes nothing in the patching. The module's own function is restored on exit.
    """
    from importlib import metadata

    original = metadata.entry_points
    read: list = []

    def entry_points(**params):
        if not read:
            read.append(original())
        return read[0].select(**params) if params else read[0]

    metadata.entry_points = entry_points  # type: ignore[assignment]
    try:
        yield
    finally:
        metadata.entry_points = original  # type: ignore[assignment]


def main(argv: list[str] | None = None) -> int:
    """Import, wait for the launcher's line, then become ``python -m locust`` (never returns then).

    Parameters
    ----------
    argv : list of str, optional
        This module's own flags (default ``sys.argv[1:]``): ``--plugin``, and ``--master`` or
        ``--worker``, the role the launcher will give it (shown by ``ps`` from the start), and
        ``--parent-pid=PID``: the launcher's process id; this process (and each worker it forks,
        with the master for parent) then ends when its parent does
        (:func:`llm_locust.parentdeath.end_with_parent`: SIGTERM, a master's graceful stop).

    Returns
    -------
    int
        0 when the launcher sent no line (nothing was run).
    """
    flags = sys.argv[1:] if argv is None else argv
    parent_pid = _parent_pid(flags)
    if parent_pid is not None:  # before anything else: a launcher killed meanwhile ends this process too
        end_with_parent(parent_pid)
    try:
        with entry_points_read_once():
            import locust  # gevent's monkey-patching, first, as in `python -m locust`
            import locust.main  # noqa: F401  imported now, run by _become_locust

            if "--plugin" in flags:
                import importlib

                for name in PRELOADED:
                    importlib.import_module(name)
        imported = True
    except Exception:  # shown by the ordinary start below, in the log
        imported = False
    message = read_go(sys.stdin.buffer)
    if message is None:
        return 0
    if message.get("api_key") is not None:
        os.environ[API_KEY_ENV] = message["api_key"]
    workers = message.get("workers", [])
    if workers:
        pids, master_pid = [], os.getpid()
        for worker in workers:
            try:
                pid = os.fork()
            except OSError:  # no room for another process: the launcher starts the rest itself
                break
            if pid == 0:  # the child: a worker, never back in this loop
                end_with_parent(master_pid)  # its parent is this master (a fork clears the request)
                os.environ[PARENT_ENV] = str(master_pid)
                _show_as_worker()
                _become_locust(worker["argv"], worker["log"], imported=imported, master=False)
                sys.exit(0)
            pids.append(pid)
        os.write(1, json.dumps({"workers": pids}).encode() + b"\n")
    _become_locust(message["argv"], message["log"], imported=imported, master="--master" in flags)
    return 0


PARENT_FLAG = "--parent-pid="


def _parent_pid(flags: list[str]) -> int | None:
    """The launcher's process id from ``--parent-pid=PID`` in ``flags``, or None.

    >>> _parent_pid(["--plugin", "--parent-pid=42", "--master"])
    42
    """
    for flag in flags:
        if flag.startswith(PARENT_FLAG) and flag[len(PARENT_FLAG) :].isdigit():
            return int(flag[len(PARENT_FLAG) :])
    return None


def _show_as_worker() -> None:
    """In a worker forked by the master: ``ps`` shows this process as a booted worker (the
    master's command line with ``--worker`` for ``--master``), not as a second master."""
    try:
        from setproctitle import setproctitle
    except ImportError:  # shown as its master, otherwise the same
        return
    argv = [sys.executable, "-m", "llm_locust.run.boot", *("--worker" if a == "--master" else a for a in sys.argv[1:])]
    setproctitle(" ".join(argv))


def _become_locust(argv: list[str], log: str, *, imported: bool, master: bool) -> None:
    """Output to ``log``, then run ``python -m locust ARGV`` in this process (exec'd when Locust
    could not be imported, so its error lands in the log as it would have)."""
    _redirect(log)
    if not imported:
        os.execv(sys.executable, [sys.executable, "-m", "locust", *argv])
    import locust.main

    sys.argv = [os.path.join(os.path.dirname(locust.main.__file__), "__main__.py"), *argv]
    try:
        locust.main.main()
    except SystemExit:
        if master:
            exit_without_final_collection()
        raise


def exit_without_final_collection() -> None:
    """Before a process that has closed its files exits: :func:`gc.freeze`, so the interpreter's
    last collections skip every object alive now (Locust's, pandas', the run's).

    Measured on this 2-core machine: a process that imported Locust, pandas and the analysis
    took 0.2-0.5 s to exit after its last statement, 0.04 s with this. Objects are still freed
    by their reference counts and ``atexit`` handlers still run (logging's flush among them);
    only garbage in reference cycles is left to the OS. So it is for the end of a process whose
    data files are closed explicitly: the Locust master (``run.json``, the CSV files and
    ``client_report.json`` closed in its ``quit`` handlers; Locust's CSV files by
    ``close_files``), the launcher after its report. Not the workers: their last messages to the
    master leave through ZeroMQ's context, which is closed as the interpreter ends.
    """
    import gc

    gc.freeze()


if __name__ == "__main__":
    sys.exit(main())
