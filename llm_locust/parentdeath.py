"""End a process when the process that started it ends, however that one died (``kill -9`` too).

Every process of a run (the Locust master, its local workers, the embedded server of ``demo``, a
log follower) is started by a launcher (``llm-locust run``, ``diagnose``, ``demo``) in a session
of its own, so a terminal's Ctrl-C reaches only the launcher, which then stops them gracefully.
A launcher killed outright (``kill -9``, the OOM killer, a CI runner's cancel) runs no such code:
its children would run on, sending load to the server until their ladder ends. So each child asks
Linux to send it a signal when its parent ends (``prctl(PR_SET_PDEATHSIG)``, ``man 2 prctl``;
the request survives ``execve``) and then checks that its parent is still the one it was given
(the parent may have died before the request took effect). Where ``prctl`` is missing (not
Linux) a daemon thread polls :func:`os.getppid` every :data:`WATCH_POLL_S` instead.

The signal is SIGTERM: a master stops the way Ctrl-C stops it (its workers told to quit, the final
``run.json`` written: the run so far stays analysable), a worker, a server or a follower exits.

The death signal is tied to the *thread* that started the child: the launcher starts its
processes from its main thread.

Two ways in: :func:`end_with_parent` in a process that is ours from its first line
(``llm_locust.run.boot``), and :func:`command_ending_with_this_process` around any other command,
which runs it through this module's ``__main__`` (the request made, then ``execvp``: the same
process id, the command's own output, exit code and signals)::

    python -m llm_locust.parentdeath PARENT_PID -- COMMAND [ARG ...]

A Locust process of ours then hands over to a watch of its own once it runs (:func:`watch_parent`),
so that it is told once.
"""

from __future__ import annotations

import os
import signal
import sys

PARENT_ENV = "LLM_LOCUST_PARENT_PID"
"""Environment variable a launcher sets for the processes it starts: its process id (a worker the
master forks gets the master's). A Locust process of ours whose parent it names watches that
parent (:func:`watch_parent`); one started otherwise (by hand, by a shell) does not.
"""
PR_SET_PDEATHSIG = 1
"""``prctl`` option (``linux/prctl.h``): the signal this process gets when its parent ends."""
WATCH_POLL_S = 0.5
"""Without ``prctl``: how often the parent watch looks at :func:`os.getppid`, s."""


def _request_death_signal(signum: int) -> bool:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):  # no libc prctl: not Linux
        return False


def _watch(parent_pid: int, signum: int) -> None:
    import time

    while os.getppid() == parent_pid:
        time.sleep(WATCH_POLL_S)
    os.kill(os.getpid(), signum)


def end_with_parent(parent_pid: int, signum: int = signal.SIGTERM) -> bool:
    """Have this process get ``signum`` once ``parent_pid``, its parent, has ended.

    Parameters
    ----------
    parent_pid : int
        The process id of the parent as the parent knows it (``os.getpid()`` there, passed on):
        when :func:`os.getppid` already differs, the parent is gone and ``signum`` is sent now.
    signum : int, default SIGTERM
        The signal.

    Returns
    -------
    bool
        True when Linux took the request (``prctl``); False when a watch thread polls instead.
    """
    taken = _request_death_signal(signum)
    if not taken:  # threading imported only here: boot.py calls this before gevent's patching
        import threading

        threading.Thread(target=_watch, args=(parent_pid, signum), name="llm-locust-parent-watch", daemon=True).start()
    if os.getppid() != parent_pid:  # it died before the request took effect
        os.kill(os.getpid(), signum)
    return taken


def watch_parent(on_gone) -> bool:
    """In a Locust process (gevent): from now on, a greenlet calls ``on_gone()`` once when the
    parent that :data:`PARENT_ENV` names has ended, instead of the death signal.

    Linux sends the death signal again each time the process is handed to another thread of the
    dying parent (``kernel/exit.c``, ``forget_original_parent``): a launcher with four threads
    killed by ``kill -9`` sent its master four SIGTERMs, the later ones cutting short the graceful
    stop the first began (its last ``run.json`` without an end time, its client report unwritten).
    A Locust process therefore cancels the request once it runs (its imports and startup are
    covered by it) and watches :func:`os.getppid` every :data:`WATCH_POLL_S` here: one call.

    Parameters
    ----------
    on_gone : callable()
        What to do once (in the watch's greenlet): a master sends itself SIGTERM (its graceful
        stop), a worker too (Locust's shutdown).

    Returns
    -------
    bool
        False when :data:`PARENT_ENV` is unset or names another process than this one's parent
        (nothing is watched: a process started by hand goes on after its shell).
    """
    expected = os.environ.get(PARENT_ENV, "")
    if not expected.isdigit() or os.getppid() != int(expected):
        return False
    _request_death_signal(0)  # 0: no signal; the watch below takes over
    import gevent

    parent_pid = int(expected)

    def watch() -> None:
        while os.getppid() == parent_pid:
            gevent.sleep(WATCH_POLL_S)
        on_gone()

    gevent.spawn(watch)
    return True


def terminate_self() -> None:
    """Send this process SIGTERM (:func:`watch_parent`'s usual ``on_gone``)."""
    os.kill(os.getpid(), signal.SIGTERM)


def command_ending_with_this_process(command: list[str]) -> list[str]:
    """``command`` run so that it ends (SIGTERM) when this process ends (see the module docstring).

    >>> command_ending_with_this_process(["sleep", "5"])[3:]  # doctest: +ELLIPSIS
    ['...', '--', 'sleep', '5']
    """
    return [sys.executable, "-m", "llm_locust.parentdeath", str(os.getpid()), "--", *command]


def main(argv: list[str]) -> int:
    """``PARENT_PID -- COMMAND [ARG ...]``: request the signal, then become ``COMMAND``.

    Returns
    -------
    int
        2 on a malformed line (never returns otherwise: ``execvp``; 127 when the command is not found).
    """
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: python -m llm_locust.parentdeath PARENT_PID -- COMMAND [ARG ...]", file=sys.stderr)
        return 2
    end_with_parent(int(argv[0]))
    try:
        os.execvp(argv[2], argv[2:])
    except OSError as exc:
        print(f"llm_locust.parentdeath: {argv[2]}: {exc}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
