"""The client's own load, measured on each worker once a second: is the load generator the bottleneck?

Three figures per interval (:data:`CLIENT_LOAD_COLUMNS`, one row per worker per second, written
by the master to ``client_load.csv``):

- ``cpu_cores``: process CPU time (``time.process_time``: user + system, every thread) over the
  interval's wall time (``time.perf_counter``), in cores; a gevent worker runs its users in one
  thread, so near 1.0 it is saturated.
- ``loop_lag_ms_mean`` / ``loop_lag_ms_max``: a probe greenlet sleeps
  :data:`LAG_PROBE_S` and measures how late it wakes (``time.perf_counter``); a busy event loop
  wakes it late, and every stream's events wait just as long to be read and stamped. Mean and
  max over the probes that woke within the interval (empty when none did).
- ``open_streams``: requests of this process in flight at the end of the interval, from the send
  to the end of the answer (:attr:`~llm_locust.client.watchdog.Watchdog.open_exchanges`).

``t_s`` is the worker's wall clock (``time.time``, Unix s) at the end of the interval. Sampling
runs from the worker's ``test_start`` to its ``test_stop`` (the last, shorter interval is
written too); the rows ride the worker's reports to the master with the request records
(:class:`~llm_locust.master.shipping.RowShipper`).

Why own code: Locust only reports a worker's CPU percent (psutil, every few seconds) and knows
nothing of event-loop lag; the three figures must come from the same interval to be read
together.
"""

from __future__ import annotations

import math
import time

import gevent

from llm_locust.analysis.schema import CLIENT_LOAD_COLUMNS as _SCHEMA_COLUMNS
from llm_locust.client.clock import master_wall_s

CLIENT_LOAD_COLUMNS: tuple[str, ...] = _SCHEMA_COLUMNS
"""``client_load.csv``: interval end (Unix s, on the master's clock: :mod:`llm_locust.client.clock`), Locust client id of the worker
(its runner's ``client_id``, as ``requests.csv``'s ``worker_id``), CPU cores used, event-loop lag
mean and max (ms), open streams (:data:`llm_locust.analysis.schema.CLIENT_LOAD_SCHEMA`)."""
LOAD_KEY = "llm_client_load"
"""Key of the load rows inside a worker report."""
CPU_KEY = "llm_cpu_percent"
"""Key of the worker's CPU usage inside its report to the master (Locust's own
``current_cpu_usage``, percent of one core; read by :mod:`llm_locust.master.clientreport`)."""
INTERVAL_S = 1.0
"""Length of one sample's interval, s."""
LAG_PROBE_S = 0.1
"""The lag probe's sleep, s."""
MIN_LAST_INTERVAL_S = 0.2
"""The last (partial) interval of a test is written only when at least this long, s."""


def _under_way(environment) -> bool:
    """The runner is spawning or running users (its test started).

    Locust's runner states are imported here, not with the module: imported with it, a plain
    ``locust -f`` worker did not exit after its test (``tests/e2e/test_client_load.py`` timed out
    twice); the cause was not found.
    """
    from locust.runners import STATE_RUNNING, STATE_SPAWNING

    return getattr(environment.runner, "state", None) in (STATE_SPAWNING, STATE_RUNNING)


class ClientLoadSampler:
    """Samples this process's load once a second between ``test_start`` and ``test_stop``.

    Parameters
    ----------
    environment : locust.env.Environment
        The worker's (or standalone process's); its ``llm_client`` (the users' shared
        :class:`~llm_locust.client.config.ClientConfig`) gives the open streams once a user started.
    shipper : llm_locust.master.shipping.RowShipper
        Where each row goes (:data:`CLIENT_LOAD_COLUMNS` tuples).
    """

    def __init__(self, environment, shipper) -> None:
        self.environment = environment
        self.shipper = shipper
        self._greenlets: list = []
        self._lags_s: list[float] = []
        self._last_perf = self._last_cpu = math.nan
        environment.events.test_start.add_listener(self._on_test_start)
        environment.events.test_stop.add_listener(self._on_test_stop)
        # a worker can get its first spawn - and fire test_start - before Locust fires init (its
        # client_ready send yields to the message loop), so a sampler made in init may have
        # missed it: start now when the test is under way, and at the spawn's end in any case
        environment.events.spawning_complete.add_listener(self._on_spawning_complete)
        if _under_way(environment):
            self._on_test_start()

    @property
    def worker(self) -> str:
        """The Locust client id of this process (as :class:`~llm_locust.client.user.LLMUser` stamps records)."""
        return getattr(self.environment.runner, "client_id", None) or "local"

    def _on_test_start(self, **_kwargs) -> None:
        if self._greenlets:
            return
        self._lags_s = []
        self._last_perf, self._last_cpu = time.perf_counter(), time.process_time()
        self._greenlets = [gevent.spawn(self._probe), gevent.spawn(self._sample_every_interval)]

    def _on_spawning_complete(self, **_kwargs) -> None:
        if _under_way(self.environment):
            self._on_test_start()

    def _on_test_stop(self, **_kwargs) -> None:
        if not self._greenlets:
            return
        gevent.killall(self._greenlets, block=False)
        self._greenlets = []
        if time.perf_counter() - self._last_perf >= MIN_LAST_INTERVAL_S:
            self.sample()

    def _probe(self) -> None:
        while True:
            before = time.perf_counter()
            gevent.sleep(LAG_PROBE_S)
            self._lags_s.append(max(0.0, time.perf_counter() - before - LAG_PROBE_S))

    def _sample_every_interval(self) -> None:
        next_t = self._last_perf + INTERVAL_S
        while True:
            gevent.sleep(max(0.0, next_t - time.perf_counter()))
            self.sample()
            next_t = max(next_t + INTERVAL_S, time.perf_counter() + INTERVAL_S / 2)  # never a burst after a stall

    def open_streams(self) -> int:
        """Requests of this process in flight now (0 before the first user started)."""
        config = getattr(self.environment, "llm_client", None)
        return config.watchdog.open_exchanges if config is not None else 0

    def sample(self) -> tuple:
        """Close the current interval: ship its row and return it (:data:`CLIENT_LOAD_COLUMNS`)."""
        now_perf, now_cpu, now_wall = time.perf_counter(), time.process_time(), master_wall_s(self.environment)
        interval_s = now_perf - self._last_perf
        cpu_cores = (now_cpu - self._last_cpu) / interval_s if interval_s > 0 else math.nan
        lags_s, self._lags_s = self._lags_s, []
        lag_mean_ms = 1000.0 * sum(lags_s) / len(lags_s) if lags_s else math.nan
        lag_max_ms = 1000.0 * max(lags_s) if lags_s else math.nan
        self._last_perf, self._last_cpu = now_perf, now_cpu
        row = (round(now_wall, 3), self.worker, round(cpu_cores, 4), round(lag_mean_ms, 3), round(lag_max_ms, 3),
               self.open_streams())  # fmt: skip
        self.shipper.put([row])
        return row


def install_cpu_reporting(environment) -> None:
    """On a worker: add its CPU usage (Locust's ``current_cpu_usage``) to every report it sends
    the master, under :data:`CPU_KEY`."""

    def add_cpu(client_id, data) -> None:
        data[CPU_KEY] = getattr(environment.runner, "current_cpu_usage", None)

    environment.events.report_to_master.add_listener(add_cpu)
