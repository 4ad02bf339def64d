"""The master's live LLM view: the stores, tied to Locust's events, and the snapshot the browser polls.

Inputs (all on the master, or a standalone process):

- request records: a sink on the run's :class:`~llm_locust.master.shipping.RecordShipper` (the rows that
  ride ``report_to_master``, the same message as Locust's own stats, so the counts agree);
- server samples: a sink on the run's :class:`~llm_locust.master.scraper.MetricsScraper`;
- the load shape's ``describe()`` (steps with wall-clock starts), the runner's state and user count.

**Horizon.** Workers report every few seconds, so the master knows a completed request only
after its worker's next report. ``horizon_s`` is the instant up to which every completed request
has arrived: the oldest "last report" among the workers reporting (now, in a standalone process
or once the test has stopped). Time-series points and finished steps end at the horizon, so the
live edge never dips for want of records that are still on their way.
"""

from __future__ import annotations

import logging
import time

import gevent
from locust.runners import STATE_STOPPED, MasterRunner

from llm_locust.analysis.loadaxis import RATE, USERS
from llm_locust.live.ladder import (
    analyze_finished,
    axis_json,
    bottleneck_json,
    critical_json,
    current_step,
    finished_steps,
    table_json,
)
from llm_locust.live.records import LiveRecords
from llm_locust.live.server import LiveServerSeries

logger = logging.getLogger(__name__)

try:
    from locust.runners import WORKER_REPORT_INTERVAL
except ImportError:  # pragma: no cover - present in every supported Locust
    WORKER_REPORT_INTERVAL = 3.0

USERS_SAMPLE_S = 1.0
"""Period of the user-count samples, s."""
MAX_USER_SAMPLES = 7200
"""User-count samples sent to the browser (the most recent two hours)."""
CACHE_S = 1.0
"""A snapshot is reused for this long (several browsers polling cost one computation)."""
ANALYSIS_EVERY_S = 5.0
"""Finished steps are re-analysed at most this often while records arrive, immediately when a step
has just finished or the test has stopped (so the final figures are always the exact ones)."""
SETTLE_LOOKBACK_S = 60.0
"""In-flight points wait for the longest request completed in this many seconds before the horizon."""


class LiveView:
    """Live LLM statistics of one Locust process (master or standalone).

    Parameters
    ----------
    environment : locust.env.Environment
        Whose events to listen to (``test_start``, ``worker_report``, ``reset_stats``,
        ``spawning_complete``, ``quitting``).
    clock : callable() -> float, default time.time
        Wall clock, Unix s.
    """

    def __init__(self, environment, *, clock=time.time, scrape_meta=None) -> None:
        self.environment = environment
        self.clock = clock
        self.records = LiveRecords()
        self.server = LiveServerSeries(scrape_meta)
        self.users: list[tuple[float, int]] = []
        self._last_report: dict[str, float] = {}
        self._sampler: gevent.Greenlet | None = None
        self._snapshot: tuple[float, dict] | None = None
        self._analysis: tuple[tuple, float, dict] | None = None
        self._warned = False
        self._table: tuple[float, list[dict], int] | None = None
        events = environment.events
        events.test_start.add_listener(self._on_test_start)
        events.worker_report.add_listener(self._on_worker_report)
        events.reset_stats.add_listener(self._on_reset_stats)
        events.spawning_complete.add_listener(self._on_spawning_complete)
        events.quitting.add_listener(self._on_quitting)

    # ---- inputs ---------------------------------------------------------------------------

    def add_records(self, rows: list[tuple]) -> None:
        """Sink for :class:`~llm_locust.master.shipping.RecordShipper` (batches of request rows).

        Never raises: a row the view cannot read is logged (once) and the run goes on.
        """
        try:
            self.records.add_rows(rows)
        except Exception:
            if not self._warned:
                self._warned = True
                logger.exception("live view: could not take a batch of request records")

    def add_server_rows(self, rows: list[tuple]) -> None:
        """Sink for :class:`~llm_locust.master.scraper.MetricsScraper` (one scrape's rows)."""
        self.server.add_rows(rows)

    def _on_test_start(self, **_kwargs) -> None:
        self.records.start(self.clock())
        if self._sampler is None:
            self._sampler = gevent.spawn(self._sample_users)

    def _on_worker_report(self, client_id, data, **_kwargs) -> None:
        self._last_report[client_id] = self.clock()

    def _on_reset_stats(self, **_kwargs) -> None:
        self.records.reset_table()
        self._table = self._snapshot = None

    def _on_spawning_complete(self, **_kwargs) -> None:
        if getattr(self.environment, "reset_stats", False):  # Locust's --reset-stats resets its counts here
            self._on_reset_stats()

    def _on_quitting(self, **_kwargs) -> None:
        if self._sampler is not None:
            self._sampler.kill(block=False)
            self._sampler = None

    def _sample_users(self) -> None:
        while True:
            runner = self.environment.runner
            if runner is not None:
                self.users.append((self.clock(), int(runner.user_count)))
            gevent.sleep(USERS_SAMPLE_S)

    # ---- derived --------------------------------------------------------------------------

    def horizon_s(self, now_s: float) -> float:
        """Wall clock up to which every completed request has reached this process (see module doc)."""
        runner = self.environment.runner
        if not isinstance(runner, MasterRunner) or runner.state == STATE_STOPPED:
            return now_s
        recent = [t for t in self._last_report.values() if now_s - t <= 3 * WORKER_REPORT_INTERVAL + 1]
        if not recent:
            return self.records.t0_s if self.records.t0_s is not None else now_s
        return min(recent)

    def shape_description(self) -> dict | None:
        shape = self.environment.shape_class
        if shape is None or not hasattr(shape, "describe"):
            return None
        try:
            return shape.describe()
        except Exception:  # a shape whose options are malformed fails on its own; the view goes on
            return None

    def table(self) -> list[dict]:
        """The per-name live table (rows for Locust's extended table), cached for :data:`CACHE_S`."""
        now_s = self.clock()
        if self._table is None or now_s - self._table[0] >= CACHE_S or self._table[2] != len(self.records):
            self._table = (now_s, self.records.table(horizon_s=self.horizon_s(now_s)), len(self.records))
        return self._table[1]

    def ladder(self, description: dict | None, horizon_s: float) -> dict:
        """Finished steps and the critical concurrency so far (cached, see :data:`ANALYSIS_EVERY_S`)."""
        steps = finished_steps((description or {}).get("steps") or [], horizon_s=horizon_s)
        stopped = getattr(self.environment.runner, "state", None) == STATE_STOPPED
        key = (len(steps), len(self.records), stopped)
        now = self.clock()
        if self._analysis is not None:
            old_key, computed_at, result = self._analysis
            if old_key == key or (old_key[0] == key[0] and not stopped and now - computed_at < ANALYSIS_EVERY_S):
                return result
        if steps.empty:
            result = {
                "steps_table": [],
                "critical": critical_json(None, finished=0),
                "bottleneck": bottleneck_json(None),
            }
        else:
            warmup_s = float((description or {}).get("warmup_s") or 0.0)
            table, critical, verdict = analyze_finished(
                self.records.requests_frame(), self.server.frame(), steps, warmup_s
            )
            enough = len(steps) >= 2
            result = {
                "steps_table": table_json(table),
                "critical": critical_json(critical if enough else None, finished=len(steps)),
                "bottleneck": bottleneck_json(verdict if enough else None),
            }
        self._analysis = (key, now, result)
        return result

    def snapshot(self) -> dict:
        """Everything the LLM tab draws, as JSON-ready data (cached for :data:`CACHE_S`)."""
        now_s = self.clock()
        if self._snapshot is not None and now_s - self._snapshot[0] < CACHE_S:
            return self._snapshot[1]
        horizon_s = self.horizon_s(now_s)
        settle_s = self.records.recent_max_e2e_s(since_s=horizon_s - SETTLE_LOOKBACK_S)
        description = self.shape_description()
        runner = self.environment.runner
        t0_s = self.records.t0_s
        data = {
            "now_s": now_s,
            "t0_s": t0_s,
            "horizon_s": horizon_s,
            "state": getattr(runner, "state", None),
            "user_count": int(runner.user_count) if runner is not None else 0,
            "bucket_s": self.records.bucket_s,
            "window_s": self.records.bucket_s * self.records.window_buckets,
            "table": self.table(),
            "series": self.records.series(horizon_s=horizon_s, settle_s=settle_s),
            "server": self.server.to_json(since_s=t0_s),
            "users": {
                "t_s": [t for t, _ in self.users[-MAX_USER_SAMPLES:]],
                "users": [u for _, u in self.users[-MAX_USER_SAMPLES:]],
            },
            "shape": _shape_json(description),
            "load_axis": axis_json(RATE if _rate_run(description) else USERS),
            "current_step": current_step(description, now_s=now_s),
            **self.ladder(description, horizon_s),
        }
        self._snapshot = (now_s, data)
        return data


def _rate_run(description: dict | None) -> bool:
    """A request-rate run: its steps carry ``rate_rps`` (or its shape says ``kind: rate``)."""
    description = description or {}
    return description.get("kind") == "rate" or any(
        s.get("rate_rps") is not None for s in description.get("steps") or []
    )


def _shape_json(description: dict | None) -> dict | None:
    if description is None:
        return None
    keep = ("kind", "ladder", "rates", "dwell_s", "warmup_s", "requests")
    out = {k: description[k] for k in keep if k in description}
    out["steps"] = [
        {
            "index": s["index"],
            "users": s["users"],
            "rate_rps": s.get("rate_rps"),
            "start_s": s["start_s"],
            "end_s": s.get("end_s"),
        }
        for s in description.get("steps") or []
    ]
    return out
