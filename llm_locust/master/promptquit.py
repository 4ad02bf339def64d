"""A master's quit that waits for its workers' last reports, not a fixed half second each time.

Locust's ``MasterRunner.quit`` (``locust/runners.py``) sends every worker ``quit`` and then
sleeps 0.5 s "to wait for final stats report from all workers" before killing its greenlets.
A headless master quits three times at the end of a test - at the run-time limit, again when
its last worker reports that it quit ("The last worker quit, stopping test"), and again in
``locust.main``'s ``shutdown`` - so every run ends ~1.5 s later than its data is in, and each
short end-to-end test pays it.

:func:`install_prompt_quit` replaces the master runner's ``quit`` with one that does what
Locust's does, in the same order (stop without telling the workers, send each worker ``quit``,
wait, kill the runner's greenlets), but waits only until every worker it told has answered:
a worker sends its final stats report and then its own ``quit`` message, in that order, on
one connection, and the master drops it from ``runner.clients`` on the latter, so an empty
``clients`` means every last report is in. It waits at most :data:`QUIT_WAIT_S` for workers
that do not answer (a stopped one; a worker the master already counts as missing is not waited
for), and logs a warning naming how many did not answer: their last stats may be missing from
Locust's counts. The bound is longer than Locust's half second because the wait ends on the
answers, so it is paid only for a silent worker. A quit while another is waiting returns at once:
the first one kills the runner's greenlets when its wait ends.
llm-locust's records do not depend on this wait: the master has every worker ship what it
holds when the test stops and waits for it (:mod:`llm_locust.master.shipping`).

Locust's sleeps also gave its CSV writer (``--csv``: ``StatsCSVFileWriter.stats_writer``, which
rewrites ``<prefix>_stats.csv``, ``_failures.csv`` and ``_exceptions.csv`` once a second and is
closed without a last write) a tick after the workers' last reports: without them, those files
could miss the last second's requests. :class:`FinalStatsCSVFileWriter`, which
:func:`install_final_stats_csv` puts in Locust's place, writes them once more when Locust closes
them (after the last reports, as the process exits), so they hold the final counts whatever the
timing - in a standalone Locust too, which had no such wait.

Why own code: Locust has no setting or hook for either.
"""

from __future__ import annotations

import logging
import time

import gevent
import locust.stats
from locust.rpc import Message
from locust.runners import STATE_MISSING, MasterRunner

logger = logging.getLogger(__name__)

QUIT_WAIT_S = 3.0
"""Longest wait for the workers' answers to ``quit``, s (Locust's fixed sleep was 0.5 s; a missing
worker is found by its heartbeats within ~3 s)."""

POLL_S = 0.01
"""How often the wait looks at the connected workers, s."""


def install_prompt_quit(environment, *, wait_s: float = QUIT_WAIT_S) -> bool:
    """On a master: make ``environment.runner.quit`` wait for its workers' answers, not 0.5 s.

    Parameters
    ----------
    environment : locust.env.Environment
        Its runner is changed only when it is a :class:`locust.runners.MasterRunner`.
    wait_s : float
        Upper bound of each wait for the workers' answers, s.

    Returns
    -------
    bool
        True when the runner's ``quit`` was replaced.
    """
    runner = environment.runner
    if not isinstance(runner, MasterRunner):
        return False
    waiting = False

    def quit() -> None:
        nonlocal waiting
        if waiting:
            return  # the quit under way kills the greenlets when its wait ends
        runner.stop(send_stop_to_client=False)
        told = []
        for client in runner.clients.all:
            runner.server.send_to_client(Message("quit", None, client.id))
            if client.state != STATE_MISSING:
                told.append(client.id)
        waiting = True
        try:
            started = time.monotonic()
            while any(client_id in runner.clients for client_id in told) and time.monotonic() - started < wait_s:
                gevent.sleep(POLL_S)
            silent = sum(client_id in runner.clients for client_id in told)
            if silent:
                logger.warning("%d of %d workers did not answer quit within %.1f s: their last stats may be "
                               "missing from Locust's counts", silent, len(told), wait_s)  # fmt: skip
        finally:
            waiting = False
        runner.greenlet.kill(block=True)

    runner.quit = quit  # type: ignore[method-assign]
    return True


class FinalStatsCSVFileWriter(locust.stats.StatsCSVFileWriter):
    """Locust's ``--csv`` writer, which writes the current stats once more as it closes its files.

    The overwritten files (``_stats.csv``, ``_failures.csv``, ``_exceptions.csv``) are written
    from their start with Locust's own header and row methods, as its writer's loop does each
    second; the history file (a row per second, appended) gets one more row with the final counts
    (once its loop has written its header: its last row could be up to a second old).
    """

    def close_files(self) -> None:
        try:
            if self.stats_history_csv_filehandle.tell() > 0:
                self._stats_history_data_rows(self.stats_history_csv_writer, time.time())
            for handle, writer, columns, rows in (
                (self.requests_csv_filehandle, self.requests_csv_writer, self.requests_csv_columns,
                 self._requests_data_rows),
                (self.failures_csv_filehandle, self.failures_csv_writer, self.failures_columns,
                 self._failures_data_rows),
                (self.exceptions_csv_filehandle, self.exceptions_csv_writer, self.exceptions_columns,
                 self._exceptions_data_rows),
            ):  # fmt: skip
                handle.seek(0)
                writer.writerow(columns)
                rows(writer)
                handle.truncate()
        except Exception:  # a closed or failing file: Locust's own close still runs
            logger.exception("could not write Locust's final CSV stats")
        super().close_files()


def install_final_stats_csv() -> None:
    """Make ``locust.main`` build :class:`FinalStatsCSVFileWriter` for ``--csv`` (it looks the
    class up in ``locust.stats`` when it builds the writer, after the locustfile is imported)."""
    if not issubclass(locust.stats.StatsCSVFileWriter, FinalStatsCSVFileWriter):
        locust.stats.StatsCSVFileWriter = FinalStatsCSVFileWriter  # type: ignore[misc]
