"""Load shapes for the diagnosis: a concurrency ladder and a single-request baseline.

Both run on the master (or a standalone process) and record the wall-clock start of each step,
which :mod:`llm_locust.rundir` writes to ``run.json`` (``shape.steps``) for ``analysis/``.
Options come from Locust's parsed options: ``--ladder``, ``--dwell-s``, ``--warmup-s``,
``--baseline-requests``.
"""

from __future__ import annotations

import time

from locust import LoadTestShape

from llm_locust.options import parse_ladder, validate_options

SPAWN_RATE_USERS_PER_S = 1000.0
"""Users started per second at a step change: fast enough that the ramp ends within the warm-up."""


class _RecordingShape(LoadTestShape):
    """A shape that records when each step started (wall clock) and describes itself."""

    abstract = True
    kind = "none"

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[dict] = []

    def _enter_step(self, index: int, users: int) -> None:
        if len(self.steps) <= index:
            now = time.time()
            if self.steps:
                self.steps[-1]["end_s"] = now
            self.steps.append({"index": index, "users": users, "start_s": now, "end_s": None})

    def _finish(self) -> None:
        if self.steps and self.steps[-1]["end_s"] is None:
            self.steps[-1]["end_s"] = time.time()

    def describe(self) -> dict:
        """The ``shape`` object of run.json: kind, settings and the steps run so far."""
        return {"kind": self.kind, "steps": [dict(step) for step in self.steps]}


class LadderShape(_RecordingShape):
    """Concurrency ladder: hold each of ``--ladder`` (e.g. 1,2,4,8) users for ``--dwell-s`` seconds.

    The first ``--warmup-s`` seconds of each step are recorded as warm-up; ``analysis/`` leaves
    them out. After the last step, requests still in flight get up to ``--drain-s`` seconds to
    finish (no new ones start), then the test stops by itself.

    Raises
    ------
    ValueError
        From :func:`~llm_locust.options.parse_ladder` on a malformed ladder, or when
        ``--warmup-s`` is not shorter than ``--dwell-s``.
    """

    kind = "ladder"

    def _settings(self) -> tuple[list[int], float, float]:
        options = self.runner.environment.parsed_options
        validate_options(options)
        ladder = parse_ladder(options.ladder)
        return ladder, options.dwell_s, options.warmup_s

    def tick(self):
        ladder, dwell_s, _ = self._settings()
        run_time = self.get_run_time()
        index = int(run_time // dwell_s)
        if index < len(ladder):
            self._enter_step(index, ladder[index])
            return ladder[index], SPAWN_RATE_USERS_PER_S
        return self._drain(run_time - len(ladder) * dwell_s)

    def _drain(self, drain_time_s: float):
        """After the last step: let in-flight requests finish (and be recorded), then stop.

        Users stop gracefully (Locust's ``stop_timeout``, raised to ``--drain-s`` for this) so the
        requests of the last step that are still streaming complete and count in its in-flight
        average; at most ``--drain-s`` seconds, plus the workers' report delay.
        """
        self._finish()
        drain_s = self.runner.environment.parsed_options.drain_s
        if drain_s <= 0 or (drain_time_s > 0 and self.get_current_user_count() == 0) or drain_time_s > drain_s + 10:
            return None
        environment = self.runner.environment
        environment.stop_timeout = max(environment.stop_timeout or 0.0, drain_s)
        return 0, SPAWN_RATE_USERS_PER_S

    def describe(self) -> dict:
        description = super().describe()
        ladder, dwell_s, warmup_s = self._settings()
        description.update(ladder=ladder, dwell_s=dwell_s, warmup_s=warmup_s)
        return description


class BaselineShape(_RecordingShape):
    """Single-request baseline: one user, one stream at a time, until ``--baseline-requests``
    requests have completed (as counted in Locust's stats on this process), then stop.

    Workers report every few seconds, so a distributed run may finish a few extra requests;
    ``analysis/`` takes the first N by start time.
    """

    kind = "baseline"

    def tick(self):
        options = self.runner.environment.parsed_options
        validate_options(options)
        if self.runner.stats.total.num_requests >= options.baseline_requests:
            self._finish()
            return None
        self._enter_step(0, 1)
        return 1, 1.0

    def describe(self) -> dict:
        description = super().describe()
        options = self.runner.environment.parsed_options
        description.update(requests=options.baseline_requests, warmup_s=0.0)
        return description
