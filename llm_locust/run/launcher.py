"""Start a real Locust master and N local worker processes for one run, and wait for them.

This is Locust's own master/worker mode (ZeroMQ on loopback), started as separate OS processes,
not a distribution layer of ours: the same locustfile and flags work with workers on other
machines (``locust -f … --worker --master-host …``) or in Kubernetes (``k8s/``).

Every process this module starts is stopped by it, by PID, if it is still running at the end,
and ends by itself when this process dies without stopping it (``kill -9``: :mod:`llm_locust.parentdeath`).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from llm_locust.auth import api_key_out_of_argv, child_env
from llm_locust.parentdeath import PARENT_ENV, command_ending_with_this_process
from llm_locust.run.boot import PARENT_FLAG, go_message
from llm_locust.run.progress import RunProgress, plan_of

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

    _SignalHandler = Callable[[int, FrameType | None], Any] | int | None  # what signal.signal returns

GRACE_S = 30.0
"""How long processes get to exit on their own after SIGTERM."""
WORKER_EXIT_GRACE_S = 5.0
"""How long workers get to exit on their own once the master has ended. Locust forgets a worker
that reported it stopped (until it says it is ready again, ``--stop-timeout`` later), so the
master's quit message does not always reach it; its data is all with the master by then."""

EXIT_TIMEOUT = 124
"""``--timeout-s`` ran out: the run was stopped, its data kept and analysed."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT): the run was stopped, its data kept and analysed (128 + 2, the shell's code)."""
EXIT_TERMINATED = 143
"""SIGTERM (CI cancellation, ``docker stop``, Kubernetes): stopped like Ctrl-C (128 + 15)."""
STOPPED_CODES = (EXIT_TIMEOUT, EXIT_INTERRUPTED, EXIT_TERMINATED)
"""Exit codes of a run stopped before its end whose data was kept (and is analysed)."""


class SigtermAsInterrupt:
    """While entered, SIGTERM stops this process the way Ctrl-C does (a context manager).

    The first SIGTERM raises :class:`KeyboardInterrupt` in the main thread, so the code that
    handles Ctrl-C (:func:`run_locust`: stop the master gracefully, then the workers) handles it
    too; :attr:`exit_code` then says 143 instead of 130. Once the run is being stopped
    (:meth:`stopping`, or after the first SIGTERM) later SIGTERMs are only noted: the graceful stop
    and the report that follows are bounded, and a second signal must not cut them short
    (GitHub Actions, for one, sends SIGINT and then SIGTERM). The previous handler is restored on
    exit. Outside the main thread (where Python allows no handler) it does nothing.

    Attributes
    ----------
    terminated : bool
        The stop was a SIGTERM's (the first stop request was one).
    ignored : int
        SIGTERMs and SIGINTs that arrived once the run was already being stopped.
    """

    def __init__(self) -> None:
        self.terminated = False
        self.ignored = 0
        self._stopping = False
        self._installed = False
        self._previous: _SignalHandler = None
        self._previous_sigint: _SignalHandler = None

    def __enter__(self) -> SigtermAsInterrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
            self._installed = True
        return self

    def __exit__(self, *_exc) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous if self._previous is not None else signal.SIG_DFL)
            if self._previous_sigint is not None:
                signal.signal(signal.SIGINT, self._previous_sigint)
                self._previous_sigint = None
            self._installed = False

    def _on_sigterm(self, _signum, _frame) -> None:
        if self._stopping:
            self.ignored += 1
            return
        self._stopping = True
        self.terminated = True
        raise KeyboardInterrupt

    def _on_late_signal(self, _signum, _frame) -> None:
        self.ignored += 1

    def stopping(self) -> None:
        """From now on a SIGTERM, and a second Ctrl-C (SIGINT), is only noted (the run is over or
        being stopped: the graceful stop and the report after it are bounded, and a second Ctrl-C
        used to cut them short with a traceback and no report)."""
        self._stopping = True
        if self._installed and self._previous_sigint is None:
            self._previous_sigint = signal.signal(signal.SIGINT, self._on_late_signal)

    @property
    def exit_code(self) -> int:
        """143 when a SIGTERM stopped the run, else 130 (Ctrl-C)."""
        return EXIT_TERMINATED if self.terminated else EXIT_INTERRUPTED


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def stop_process(process: subprocess.Popen, *, grace_s: float = GRACE_S) -> None:
    """SIGTERM ``process`` (one we started), wait ``grace_s``, then SIGKILL it."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def master_killed(master: subprocess.Popen) -> bool:
    """Whether ``master`` (ended) was ended by a signal it did not handle (``kill -9``, the OOM
    killer, an uncaught KeyboardInterrupt), so it never sent its workers Locust's quit message."""
    return master.returncode is not None and master.returncode < 0


def signal_name(signum: int) -> str:
    """``SIGKILL`` for 9, ``signal 40`` for a number without a name here."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def wait_for_exit(processes, grace_s: float) -> None:
    """Wait until every one of ``processes`` has ended, or ``grace_s`` seconds in all (at least
    0.1 s each); those still running are left running."""
    deadline = time.monotonic() + grace_s
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass


def can_watch_forked() -> bool:
    """Whether this system lets the launcher watch a process it did not start: Linux's pidfds
    (:func:`os.pidfd_open`, Linux 5.3 and later), which :class:`ForkedProcess` needs."""
    if not hasattr(os, "pidfd_open") or not hasattr(signal, "pidfd_send_signal"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # ENOSYS: an older kernel, or a sandbox without the call
        return False
    return True


class ForkedProcess:
    """A worker that the booted master forked (:mod:`llm_locust.run.boot`): a process this one did
    not start, watched through a pidfd (Linux 5.3 and later), so a recycled process id is never
    signalled.

    The part of :class:`subprocess.Popen` that :func:`run_locust` uses: ``pid``, ``args``,
    :meth:`poll`, :meth:`wait`, :meth:`terminate`, :meth:`kill`. Its exit status belongs to its
    parent, the master (which reaps it), not to this process: :attr:`returncode` only says that
    it has ended (:data:`ENDED`), never how.

    Parameters
    ----------
    pid : int
        The worker's process id, as the master reported it.
    """

    ENDED = 0
    """:attr:`returncode` once the process has ended (its real status is not readable here)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.args = ["forked", "--worker"]
        self.returncode: int | None = None
        try:
            self._fd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:  # ended (and reaped) already
            self._fd, self.returncode = None, self.ENDED

    def _ended(self, timeout_s: float | None) -> bool:
        if self._fd is None:
            return True
        readable, _, _ = select.select([self._fd], [], [], timeout_s)
        if readable:  # a pidfd reads as ready once its process has exited
            os.close(self._fd)
            self._fd, self.returncode = None, self.ENDED
        return bool(readable)

    def poll(self) -> int | None:
        """:data:`ENDED` once the process has ended, else None."""
        self._ended(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait until the process has ended (at most ``timeout`` s; None: no bound).

        Raises
        ------
        subprocess.TimeoutExpired
            It was still running after ``timeout`` s.
        """
        if not self._ended(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self.ENDED

    def _signal(self, signum: int) -> None:
        if self._fd is not None:
            try:
                signal.pidfd_send_signal(self._fd, signum)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        """SIGTERM, unless it has ended."""
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL, unless it has ended."""
        self._signal(signal.SIGKILL)


class BootedLocust:
    """Locust processes started at once (:mod:`llm_locust.run.boot`), told their command line later.

    Parameters
    ----------
    workers : int
        Local workers of the run besides the master (>= 0).
    plugin : bool
        The run's locustfile is one of llm-locust's (``llm_locust/locustfiles/``): preload
        :data:`llm_locust.run.boot.PRELOADED`.
    fork : bool, optional
        The master's process forks the workers when it is told its line (:meth:`go` with
        ``workers``), so Locust is imported once for all of them; otherwise each worker is a
        process of its own, started here. Default: fork where :func:`can_watch_forked`.

    Attributes
    ----------
    master : subprocess.Popen or None
        The master's process until :meth:`take_master` hands it out.
    workers : list of subprocess.Popen
        The workers' processes not yet handed out (none when the master forks them).
    fork_workers : int
        Workers the master is to fork (``workers`` when forking, else 0).

    Every process is in a session of its own (a terminal's Ctrl-C reaches only the launcher), ends
    when this process ends however it died (``--parent-pid``: :mod:`llm_locust.parentdeath`) and
    inherits the launcher's environment; none sends anything before :meth:`go`. Its command line
    names its role (``--master`` or ``--worker``) from the start (a forked worker keeps its
    master's).
    """

    def __init__(self, workers: int, *, plugin: bool, fork: bool | None = None) -> None:
        fork = can_watch_forked() if fork is None else fork
        self.fork_workers = workers if fork else 0
        command = [sys.executable, "-m", "llm_locust.run.boot", *(["--plugin"] if plugin else []),
                   f"{PARENT_FLAG}{os.getpid()}"]  # fmt: skip
        self.master: subprocess.Popen | None = self._start([*command, "--master"], pipe_out=bool(self.fork_workers))
        self.workers = [] if fork else [self._start([*command, "--worker"]) for _ in range(workers)]

    @staticmethod
    def _start(command: list[str], *, pipe_out: bool = False) -> subprocess.Popen:
        return subprocess.Popen(
            command,
            env={**os.environ, PARENT_ENV: str(os.getpid())},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE if pipe_out else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def take_master(self) -> subprocess.Popen | None:
        """The master's process (once; None after that)."""
        master, self.master = self.master, None
        return master

    def take_worker(self) -> subprocess.Popen | None:
        """A worker's process, or None when none is left."""
        return self.workers.pop(0) if self.workers else None

    @staticmethod
    def go(process: subprocess.Popen, command: list[str], log: Path, api_key: str | None, workers=()) -> bool:
        """Send ``process`` its Locust command line (``command``: ``python -m locust …``) and log.

        ``workers``: ``(command, log)`` pairs of the workers it is to fork first (a master booted
        with ``fork``); their process ids then come from :meth:`forked`.

        Returns
        -------
        bool
            False when the process had ended before (then it runs nothing: start it otherwise).

        Raises
        ------
        ValueError
            A command that is not ``python -m locust``, a role other than the one the process
            was booted as, or workers for a process that cannot report them.
        """
        assert process.stdin is not None
        if process.poll() is not None:
            return False
        prefix = [sys.executable, "-m", "locust"]
        role = process.args[-1] if isinstance(process.args, list) else None
        for index, one in enumerate([command, *(worker for worker, _ in workers)]):
            if one[: len(prefix)] != prefix:
                raise ValueError(f"not a `python -m locust` command: {one[:3]}")
            wanted = role if index == 0 else "--worker"
            if wanted in ("--master", "--worker") and wanted not in one:
                raise ValueError(f"a process booted as {wanted} given another role: {one}")
        if workers and process.stdout is None:
            raise ValueError("this process was booted without a pipe to report the workers it forks")
        message = go_message(
            command[len(prefix) :], str(log), api_key, [(worker[len(prefix) :], str(path)) for worker, path in workers]
        )
        try:
            process.stdin.write(message)
            process.stdin.close()
        except (BrokenPipeError, OSError):
            return False
        return True

    @staticmethod
    def forked(process: subprocess.Popen, *, timeout_s: float = 10.0) -> list[ForkedProcess]:
        """The workers ``process`` forked after :meth:`go` with ``workers`` (its first line on its
        standard output): an empty list when it ended, or said nothing within ``timeout_s``."""
        if process.stdout is None:
            return []
        fd, line, deadline = process.stdout.fileno(), b"", time.monotonic() + timeout_s
        while not line.endswith(b"\n"):
            readable, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(fd, 4096) if readable else b""
            if not chunk:
                break
            line += chunk
        process.stdout.close()  # the one line it writes there: its output goes to its log now
        try:
            pids = json.loads(line)["workers"]
        except (ValueError, KeyError, TypeError):
            return []
        return [ForkedProcess(int(pid)) for pid in pids]

    def cancel(self) -> None:
        """End every process not handed out (SIGTERM: they are still importing or waiting for
        their line, and have sent and written nothing) and wait for it. Safe to call again."""
        left = [p for p in (self.master, *self.workers) if p is not None]
        self.master, self.workers = None, []
        for process in left:
            for pipe in (process.stdin, process.stdout):
                try:
                    if pipe is not None:
                        pipe.close()
                except OSError:
                    pass
            if process.poll() is None:
                process.terminate()
        for process in left:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


@dataclass(kw_only=True)
class LocustRun:
    """One distributed run: what to start and where its files go.

    Attributes
    ----------
    locustfile : Path
        The locustfile master and workers load.
    run_dir : Path
        Run directory (``--run-dir``); process logs go there too (``locust_master.log``,
        ``locust_worker_<i>.log``).
    workers : int
        Local worker processes (>= 1, or >= 0 with ``remote_workers``).
    remote_workers : int
        Workers started elsewhere (other machines, Kubernetes pods: ``locust -f … --worker
        --master-host ADDRESS --master-port master_port``) that the master waits for besides the
        local ones. With any, the master listens on every interface at ``master_port``; without,
        on 127.0.0.1 at a free port.
    master_port : int
        The master's port for remote workers (Locust's default, 5557).
    locust_args : list of str
        Further Locust / llm-locust flags for the master (``--host``, ``--model``, ``--ladder``…);
        Locust forwards them to the workers.
    timeout_s : float
        Upper bound on the whole run; past it the master is stopped (SIGTERM) and the run is
        reported as timed out.
    web_port : int or None
        None: headless. Otherwise Locust's web UI (with the LLM tab) on 127.0.0.1 at this port;
        the test still starts by itself (``--autostart``) and the master quits ``web_linger_s``
        seconds after it ends (``--autoquit``), so the run stays bounded.
    web_linger_s : float
        With the web UI: how long it stays up after the test ends, s.
    """

    locustfile: Path
    run_dir: Path
    workers: int = 2
    remote_workers: int = 0
    master_port: int = 5557
    locust_args: list[str] = field(default_factory=list)
    timeout_s: float = 3600.0
    web_port: int | None = None
    web_linger_s: float = 30.0
    booted: BootedLocust | None = None
    """Processes started before the run's flags were checked (:mod:`llm_locust.run.boot`), given
    their command lines here instead of new processes; None: start every process here."""

    @property
    def web_url(self) -> str | None:
        """The web UI's address, None when headless."""
        return None if self.web_port is None else f"http://127.0.0.1:{self.web_port}/"

    def _ui_args(self) -> list[str]:
        if self.web_port is None:
            return ["--headless"]
        return [
            "--autostart",
            "--autoquit",
            str(max(0, round(self.web_linger_s))),
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(self.web_port),
        ]

    def master_command(self, port: int) -> list[str]:
        return [
            sys.executable, "-m", "locust", "-f", str(self.locustfile),
            "--master", *self._ui_args(), "--expect-workers", str(self.workers + self.remote_workers),
            "--master-bind-host", "*" if self.remote_workers else "127.0.0.1", "--master-bind-port", str(port),
            "--csv", str(self.run_dir / "locust"), "--csv-full-history",
            "--run-dir", str(self.run_dir), "--only-summary",
            *self.locust_args,
        ]  # fmt: skip

    def worker_command(self, port: int) -> list[str]:
        return [
            sys.executable, "-m", "locust", "-f", str(self.locustfile),
            "--worker", "--master-host", "127.0.0.1", "--master-port", str(port),
        ]  # fmt: skip


def run_locust(
    run: LocustRun, *, progress_every_s: float = 10.0, echo=print, signals: SigtermAsInterrupt | None = None
) -> int:
    """Start the master and the workers, wait for the run to end, stop what is left.

    Parameters
    ----------
    run : LocustRun
        What to start.
    progress_every_s : float
        Seconds between progress lines (0: none).
    echo : callable(str)
        Where progress lines go.
    signals : SigtermAsInterrupt, optional
        The caller's, already entered (so a SIGTERM before or after this call is handled too);
        by default one of its own for the duration of the call.

    Returns
    -------
    int
        The master's exit code (Locust: 0 ok, ``--exit-code-on-error`` (1) when a request failed,
        2 usage/locustfile error), 124 when ``run.timeout_s`` (plus ``run.web_linger_s`` with the
        web UI) ran out, 130 on Ctrl-C (KeyboardInterrupt), 143 on SIGTERM, 128 + N when a signal
        N from elsewhere ended the master (137: ``kill -9``, the OOM killer; its workers are then
        stopped at once, with no wait for a quit message it never sent). When stopped, the
        master got SIGTERM first (Locust's graceful shutdown: the workers' last reports, final
        ``run.json``, ``client_report.json``), then the workers; every process started here has
        ended (SIGKILL after :data:`GRACE_S`) when this returns.
    """
    if signals is None:
        with SigtermAsInterrupt() as own:
            return run_locust(run, progress_every_s=progress_every_s, echo=echo, signals=own)
    run.run_dir.mkdir(parents=True, exist_ok=True)
    limit_s = run.timeout_s + (run.web_linger_s if run.web_port is not None else 0.0)
    port = run.master_port if run.remote_workers else free_port()
    logs: list[IO[str]] = []
    processes: list[subprocess.Popen] = []
    started = time.monotonic()
    try:
        try:
            code = _start_and_wait(run, port, logs, processes, started, limit_s, progress_every_s, echo, signals)
        except KeyboardInterrupt:
            signals.stopping()
            reason = "terminated (SIGTERM)" if signals.terminated else "interrupted"
            echo(f"{reason}: stopping the run, keeping the data so far")
            if processes:
                stop_process(processes[0])
            code = signals.exit_code
        signals.stopping()
        if processes and master_killed(processes[0]):  # no quit message went out: stop the workers now
            if code == processes[0].returncode:  # a signal from elsewhere, not this run's stop
                echo(
                    f"the Locust master was ended by {signal_name(-code)}: stopping its workers, keeping the data so far"
                )
                code = 128 - code  # the shell's convention, as for the launcher itself (137: SIGKILL)
        else:  # a master that quit sent its workers the quit message: give them time to act on it
            wait_for_exit(processes[1:], WORKER_EXIT_GRACE_S)
        return code
    finally:
        for process in reversed(processes):
            stop_process(process)
        for log in logs:
            log.close()


def remote_workers_line(run: LocustRun, port: int) -> str:
    """What the launcher prints when the master waits for workers started elsewhere: how many,
    and the command that starts one (the run waits for them until ``--timeout-s``).

    >>> print(remote_workers_line(LocustRun(locustfile=Path("/l/ladder.py"), run_dir=Path("r"), remote_workers=2), 5557))
    waiting for 2 remote worker(s) (the run starts once they are connected, or stops at --timeout-s 3600): start each with `locust -f /l/ladder.py --worker --master-host <master address> --master-port 5557`
    """
    return (
        f"waiting for {run.remote_workers} remote worker(s) (the run starts once they are connected, or stops at "
        f"--timeout-s {run.timeout_s:.0f}): start each with `locust -f {run.locustfile} --worker --master-host "
        f"<master address> --master-port {port}`"
    )


def _start_locust(
    command: list[str],
    log_path: Path,
    env: dict,
    api_key: str | None,
    logs: list[IO[str]],
    booted: subprocess.Popen | None,
) -> subprocess.Popen:
    """``booted`` given its command line and log (:class:`BootedLocust`), or,
    without one or when it had ended, a new process writing to ``log_path`` (appended to ``logs``)."""
    if booted is not None and BootedLocust.go(booted, command, log_path, api_key):
        return booted
    log = open(log_path, "w")
    logs.append(log)
    return subprocess.Popen(
        command_ending_with_this_process(command),
        env={**env, PARENT_ENV: str(os.getpid())}, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


def _start_and_wait(
    run: LocustRun,
    port: int,
    logs: list[IO[str]],
    processes: list,
    started: float,
    limit_s: float,
    progress_every_s: float,
    echo,
    signals: SigtermAsInterrupt,
) -> int:
    """Start the master, then the workers (appended to ``processes`` as they start); wait for the
    master's end, or stop it at ``limit_s`` (returns 124)."""
    # Own sessions: a terminal's Ctrl-C reaches only this process, which then stops the master
    # gracefully (SIGTERM) and the workers after it, so the data of the run so far is kept.
    # the API key travels in the environment, never on a command line (/proc/<pid>/cmdline, ps)
    command, api_key = api_key_out_of_argv(run.master_command(port))
    env = child_env(api_key)
    booted = run.booted
    worker_logs = [run.run_dir / f"locust_worker_{index}.log" for index in range(run.workers)]
    master_log = run.run_dir / "locust_master.log"
    booted_master = booted.take_master() if booted else None
    forking = booted is not None and booted_master is not None and booted.fork_workers == run.workers > 0
    if (
        forking
        and booted_master is not None
        and BootedLocust.go(  # (forking holds only with a booted master)
            booted_master, command, master_log, api_key, [(run.worker_command(port), log) for log in worker_logs]
        )
    ):
        processes.append(booted_master)
        processes.extend(BootedLocust.forked(booted_master))
        worker_logs = worker_logs[len(processes) - 1 :]  # those it did not fork (none, unless it failed)
    else:
        processes.append(_start_locust(command, master_log, env, api_key, logs, booted_master))
    master = processes[0]
    if run.web_url is not None:
        echo(f"web UI: {run.web_url}?tab=llm  (LLM tab; stays up {run.web_linger_s:.0f} s after the run ends)")
    if run.remote_workers:
        echo(remote_workers_line(run, port))
    for log_path in worker_logs:
        processes.append(
            _start_locust(
                run.worker_command(port), log_path, env, api_key, logs, booted.take_worker() if booted else None
            )  # fmt: skip
        )
    if booted is not None:
        booted.cancel()  # any left over (none when the counts agree)
    progress = RunProgress(run.run_dir, started, plan_of(str(run.locustfile), run.locust_args))
    next_progress = started + progress_every_s
    while True:
        try:
            return master.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            now = time.monotonic()
            if now - started > limit_s:
                signals.stopping()
                echo(f"run exceeded its {limit_s:.0f} s bound (--timeout-s): stopping it, keeping the data so far")
                stop_process(master)
                return EXIT_TIMEOUT
            if now >= next_progress and progress_every_s > 0:
                echo(progress.line())
                next_progress = now + progress_every_s
