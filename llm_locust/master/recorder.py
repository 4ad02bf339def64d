"""The master's side of a run: run directory, metrics scraper and run.json, tied to Locust's lifecycle.

Lifecycle (Locust events on the master or a standalone process):

- ``test_start``: open the run directory, write a first ``run.json``, start the scraper and the
  server capture (``--server-log`` followed, ``/props`` / ``/info``: :mod:`llm_locust.master.servercapture`).
- ``worker_report`` / ``request`` (via :class:`~llm_locust.master.shipping.RecordShipper`): append rows;
  the workers' load samples (:mod:`llm_locust.client.load`) likewise to ``client_load.csv``.
- during the run (master only): workers Locust marks ``missing`` are recorded in ``run.json``
  as ``workers_lost`` and ``workers_missing`` (:mod:`llm_locust.master.workerloss`) as soon as
  they are noticed; each worker's host and pid (from its reports) as ``worker_processes``.
- ``quitting`` and ``quit``: stop the scraper, write the final ``run.json`` (end time, the shape's
  steps). Both, because on Ctrl-C Locust fires ``quitting`` before the workers' last reports
  arrive; rows are flushed as they come, so nothing measured is lost either way.

``run.json`` never contains the API key: the command line is stored with ``--api-key``'s value
replaced by ``***``.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import gevent

from llm_locust.analysis.schema import CLIENT_REPORT, REQUESTS_CSV
from llm_locust.auth import auth_headers, is_api_key_flag
from llm_locust.client.clock import WorkerClock
from llm_locust.client.load import LOAD_KEY, ClientLoadSampler, install_cpu_reporting
from llm_locust.client.masterwatch import MasterSilenceWatch
from llm_locust.client.models import first_served_model, host_problem
from llm_locust.client.prompts import load_prompts, prompt_set_sha256
from llm_locust.client.spawncache import install_default_args_cache
from llm_locust.master.clocksync import ClockResponder
from llm_locust.master.config import MasterConfig, metrics_targets, metrics_urls, parse_labels, targets_line
from llm_locust.master.healgate import HealGate, install_ping_answer
from llm_locust.master.promptquit import install_final_stats_csv, install_prompt_quit
from llm_locust.master.runwriter import RunDirectory
from llm_locust.master.scraper import MetricsScraper
from llm_locust.master.servercapture import ServerCapture
from llm_locust.master.shipping import RecordShipper, RowShipper
from llm_locust.master.workerloss import WorkerLossWatch, install_process_reporting
from llm_locust.master.workerready import ReadyGate, announce_ready, slow_init_for_tests
from llm_locust.master.workerwait import wait_for_workers
from llm_locust.options import add_options, validate_options
from llm_locust.parentdeath import terminate_self, watch_parent
from llm_locust.preload import preload_modules
from llm_locust.wallclock import local_wall_s

if TYPE_CHECKING:  # imported when first needed (make_client_report)
    from llm_locust.master.clientreport import ClientReport

logger = logging.getLogger(__name__)

REDACTED = "***"
END_OF_RUN_MODULES = (
    "pandas",
    "llm_locust.analysis.perrequest.metrics",
    "llm_locust.analysis.perrequest.itlpool",
    "llm_locust.analysis.rundir.reader",
    "llm_locust.analysis.perstep.workers",
)
"""What ``client_report.json`` imports at the end of the run (:mod:`llm_locust.master.clientreport`)."""


def redact_argv(argv: list[str], secret: str = "") -> list[str]:
    """Copy of ``argv`` with the value of ``--api-key`` (or an abbreviation of it) replaced by
    ``***``, and ``secret`` (the actual key) replaced wherever it appears in an element.

    >>> redact_argv(["locust", "--api-key", "sk-1", "--api-k=sk-2", "-u", "1"])
    ['locust', '--api-key', '***', '--api-k=***', '-u', '1']
    >>> redact_argv(["x", "--weird=Bearer sk-3"], secret="sk-3")
    ['x', '--weird=Bearer ***']
    """
    out, hide_next = [], False
    for arg in argv:
        flag, sep, _ = arg.partition("=")
        if hide_next:
            out.append(REDACTED)
            hide_next = False
        elif arg.startswith("--") and not sep and is_api_key_flag(arg):
            out.append(arg)
            hide_next = True
        elif arg.startswith("--") and sep and is_api_key_flag(flag):
            out.append(flag + "=" + REDACTED)
        elif secret and secret in arg:
            out.append(arg.replace(secret, REDACTED))
        else:
            out.append(arg)
    return out


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version  # at test_start: not at every process's start

    found = {"python": platform.python_version()}
    for package in ("llm-locust", "locust", "gevent", "orjson", "prometheus_client"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            pass
    return found


class RunRecorder:
    """Writes one run directory from a master or standalone Locust process.

    Parameters
    ----------
    environment : locust.env.Environment
        The process's environment; ``parsed_options.run_dir`` names the folder. The rest of its
        options are read once, at ``test_start``, into :attr:`config`.

    Raises
    ------
    ValueError
        A malformed ``--label`` (checked at once, before any test starts).
    """

    def __init__(self, environment) -> None:
        self.environment = environment
        parse_labels(environment.parsed_options.label)  # fail now, not at test_start
        self.run_dir_path = Path(environment.parsed_options.run_dir)
        self.config = MasterConfig()  # replaced at test_start (the web UI may change options until then)
        self.run_dir: RunDirectory | None = None
        self.scraper: MetricsScraper | None = None
        self._scrapes_logged = False
        self.meta: dict = {}
        self.server_sinks: list = []  # also handed every scrape (e.g. the web UI's live view)
        self.capture: ServerCapture | None = None  # server log, /props, /info (servercapture.py)
        self.shipper = RecordShipper(environment, self._write_requests, csv_sink=self._write_requests_text)
        self.client_report: ClientReport | None = None
        if self.shipper.role == "master":  # its module imports numpy and pandas: in the background
            preload_modules(("llm_locust.master.clientreport",))
        else:  # standalone: now, before a time limit starts and while no user measures anything
            self.make_client_report()
        self.shipper.add_sink(self._client_report_rows)
        self.load_shipper = RowShipper(environment, LOAD_KEY, self._write_client_load)
        if self.load_shipper.role == "local":  # standalone: this process is the load generator
            ClientLoadSampler(environment, self.load_shipper)
        self.worker_loss: WorkerLossWatch | None = None
        if self.shipper.role == "master":
            self.worker_loss = WorkerLossWatch(environment, on_change=self._refresh_meta)
            HealGate(environment)  # a missing worker is back only when it answers, not on stale heartbeats
        events = environment.events
        events.test_start.add_listener(self._on_test_start)
        events.spawning_complete.add_listener(self._on_spawning_complete)
        events.quitting.add_listener(self._on_quitting)
        events.quit.add_listener(self._on_quit)

    def _write_requests(self, rows: list[tuple]) -> None:
        if self.run_dir is None:
            logger.error("records arrived before test_start; %d rows not written", len(rows))
            return
        self.run_dir.requests.write_rows(rows)

    def make_client_report(self) -> None:
        """Make the :class:`~llm_locust.master.clientreport.ClientReport` (once). A standalone
        process makes it at once; a master once its users are spawned or its first records come
        (whichever is first: never on the way to the first request), its module imported in the
        background since the start. Then gevent's cached loop time is refreshed: an import that
        blocked the loop must not make the next timers fire early."""
        if self.client_report is None:
            from llm_locust.master.clientreport import ClientReport

            self.client_report = ClientReport(self.environment)
            gevent.get_hub().loop.update_now()

    def _client_report_rows(self, rows: list[tuple]) -> None:
        self.make_client_report()
        assert self.client_report is not None
        self.client_report.add_rows(rows)

    def _write_requests_text(self, text: bytes | str, rows: int) -> None:
        if self.run_dir is None:
            logger.error("records arrived before test_start; %d rows not written", rows)
            return
        self.run_dir.requests.write_text(text, rows)

    def _write_client_load(self, rows: list[tuple]) -> None:
        if self.run_dir is None:
            logger.warning("client load rows arrived before test_start; %d rows not written", len(rows))
            return
        self.run_dir.client_load.write_rows(rows)

    @property
    def requests_csv(self) -> Path:
        """Path of the run directory's ``requests.csv`` (it exists from ``test_start`` on)."""
        return self.run_dir_path / REQUESTS_CSV

    def _on_test_start(self, environment, **_kwargs) -> None:
        if self.run_dir is not None:  # a second test in the same process (web UI restart): keep the first dir
            return
        config = self.config = MasterConfig.from_options(environment.parsed_options)
        self.run_dir = RunDirectory(self.run_dir_path)
        prompts = load_prompts(config.prompts_file or None)
        targets = metrics_targets(config, environment.host)
        logger.info(targets_line(targets, environment.host))
        model = config.model
        if not model and environment.host:
            try:
                model = first_served_model(environment.host, api_key=config.api_key)
            except Exception as exc:  # the run goes on; run.json just lacks the name
                logger.warning("could not ask the server for its model name: %s", exc)
        self.meta = {
            "started_at_s": local_wall_s(),
            "ended_at_s": None,
            "command_line": redact_argv(sys.argv, config.api_key),
            "host": environment.host,
            "model": model,
            "workload": {
                "protocol": config.protocol,
                "max_tokens": config.max_tokens,
                "ignore_eos": config.ignore_eos,
                "temperature": config.temperature,
                "prompt_set_sha256": prompt_set_sha256(prompts),
                "prompts": len(prompts),
                **config.workload_meta,
            },
            "shape": {"kind": "none", "steps": []},
            "metrics_urls": [t.url for t in targets],
            "metrics_sources": [t.to_json() for t in targets],
            "scrape_interval_s": config.scrape_interval_s,
            "scrape_timeout_s": config.scrape_timeout_s,
            "scrape_max_bytes": config.scrape_max_bytes,
            "workers": [],
            "workers_lost": [],
            "versions": _versions(),
            "labels": dict(config.labels),
        }
        slo = getattr(environment.parsed_options, "slo", "")
        if slo:
            self.meta["slo"] = slo
        self.capture = ServerCapture(config, environment.host, self.run_dir.path)
        self.meta.update(self.capture.meta)
        self.capture.start()
        self._refresh_meta()
        if self.meta["metrics_urls"]:
            self.scraper = MetricsScraper(
                self.meta["metrics_urls"],
                config.scrape_interval_s,
                self.run_dir.server_metrics.write_rows,
                auth_headers(config.api_key),
                timeout_s=config.scrape_timeout_s,
                max_bytes=config.scrape_max_bytes,
                outcome_sink=self.run_dir.server_scrapes.write_rows,
            )
            self.scraper.extra_sinks = self.server_sinks
            self.scraper.on_duplicate = self._on_duplicate
            self.scraper.start()
        if self.worker_loss is not None:
            self.worker_loss.start()

    def _on_duplicate(self, found: dict) -> None:
        """An endpoint reaches the same server as another: run.json says so at once."""
        self.meta.setdefault("metrics_duplicates", []).append(dict(found))
        self._refresh_meta()

    def _on_spawning_complete(self, user_count, **_kwargs) -> None:
        if self.run_dir is not None:  # a ladder step began: record its start in run.json now
            self._refresh_meta()
        self.make_client_report()
        # the client report's imports, needed at the end: while the test runs, once its users are
        # sending (not at test_start: the import would hold the GIL while the master starts them)
        preload_modules(END_OF_RUN_MODULES)

    def _report_user_errors(self) -> None:
        """Exceptions raised in users (an ``on_start`` that failed, on any worker: Locust sends them
        to the master) go to the master log once each and to ``run.json`` (``user_errors``)."""
        exceptions = getattr(self.environment.runner, "exceptions", None) or {}
        seen = self.meta.setdefault("user_errors", [])
        logged = {error["msg"] for error in seen}
        for row in list(exceptions.values()):
            message = redact_argv([str(row["msg"])], self.config.api_key)[0]
            if message not in logged:
                logger.error("a user failed (%d times so far): %s", row["count"], message)
                seen.append({"msg": message, "count": row["count"]})
                logged.add(message)
            else:
                for error in seen:
                    if error["msg"] == message:
                        error["count"] = row["count"]

    def _refresh_meta(self) -> None:
        self._report_user_errors()
        shape = self.environment.shape_class
        if shape is not None and hasattr(shape, "describe"):
            self.meta["shape"] = shape.describe()
        runner = self.environment.runner
        clients = getattr(runner, "clients", None)
        if clients is not None:
            seen = set(self.meta["workers"])
            self.meta["workers"] += sorted(c.id for c in clients.all if c.id not in seen)
        if self.worker_loss is not None:
            self.meta["workers_lost"] = self.worker_loss.losses()
            self.meta["workers_missing"] = self.worker_loss.missing_intervals()
            self.meta["worker_processes"] = self.worker_loss.describe_processes()
        if (clocks := getattr(self.environment, "llm_clock_responder", None)) is not None:
            self.meta["clock_offsets"] = clocks.describe()
        if self.run_dir is not None:  # a change before the run began is written with the run's start
            self.run_dir.write_meta(self.meta)

    def _finish(self) -> None:
        if self.run_dir is None:
            return
        self.shipper.drain()  # every record received, before the end time and the report
        if self.shipper.ingest is not None:
            self.meta["ingest"] = ingest = self.shipper.ingest.describe()
            logger.info("records ingested: %d, lag max %.2f s (last %s s), most held by workers %d, deepest queue %d",
                        ingest["records"], ingest["max_lag_s"], ingest["last_lag_s"], ingest["peak_held_records"],
                        ingest["peak_queue_records"])  # fmt: skip
        if self.scraper is not None:
            self.scraper.stop()
            self._log_scrapes()
        if self.capture is not None:
            self.capture.stop()
            self.meta.update(self.capture.meta)  # what the capture learnt by its end (the log command's end)
        if self.worker_loss is not None:
            self.worker_loss.stop()
        self.meta["ended_at_s"] = local_wall_s()
        self._refresh_meta()

    def _log_scrapes(self) -> None:
        """Scrapes per endpoint, failed ones by kind, on the console (once: ``_finish`` runs twice)."""
        if self.scraper is None or self._scrapes_logged:
            return
        self._scrapes_logged = True
        for line in self.scraper.summary_lines():
            (logger.warning if "failed" in line else logger.info)("server scrapes: %s", line)

    def _on_quitting(self, environment, **_kwargs) -> None:
        self._finish()

    def _on_quit(self, exit_code, **_kwargs) -> None:
        self._finish()
        if self.run_dir is not None:
            logger.info(
                "run directory %s: %d requests, %d server samples",
                self.run_dir.path,
                self.run_dir.requests.rows_written,
                self.run_dir.server_metrics.rows_written,
            )
            self._write_client_report(self.run_dir)
            self.run_dir.close()

    def _write_client_report(self, run_dir: RunDirectory) -> None:
        """``client_report.json`` (see :mod:`llm_locust.master.clientreport`), and its table on stdout."""
        from llm_locust.master.clientreport import format_summary

        self.make_client_report()
        assert self.client_report is not None
        try:
            losses = []
            if self.worker_loss is not None:
                losses = [{**loss, "last_report_s": self.worker_loss.last_report_s.get(loss["worker"])}
                          for loss in self.worker_loss.losses()]  # fmt: skip
            report = self.client_report.write(run_dir.path / CLIENT_REPORT, run_dir.path / REQUESTS_CSV,
                                              workers_lost=losses)  # fmt: skip
        except Exception:  # the run's data is on disk already; a report failure must not hide it
            logger.exception("could not write client_report.json")
            return
        print(format_summary(report, self.meta.get("started_at_s")), flush=True)


def install(events) -> None:
    """Register llm-locust with Locust: its options, and on ``init`` the recorder or the shipper.

    Called once by :mod:`llm_locust.plugin` when a locustfile imports it.
    """
    install_final_stats_csv()  # --csv files with the last reports in (promptquit.py)

    @events.init_command_line_parser.add_listener
    def _add_options(parser, **_kwargs) -> None:
        add_options(parser)

    @events.init.add_listener
    def _on_init(environment, **_kwargs) -> None:
        from locust.runners import MasterRunner, WorkerRunner

        watch_parent(terminate_self)  # started by a launcher: end with it, however it dies

        if isinstance(environment.runner, MasterRunner):
            ReadyGate(environment)  # its test_start listener before the recorder's: no load before the workers' init
            ClockResponder(environment)
            install_prompt_quit(environment)  # its end: the workers' answers, not 3 x 0.5 s

        if not isinstance(environment.runner, WorkerRunner) and environment.parsed_options is not None:
            try:
                validate_options(environment.parsed_options)
                if environment.parsed_options.host and (problem := host_problem(environment.parsed_options.host)):
                    raise ValueError(problem)
            except ValueError as exc:  # plain `locust -f`: one clear line, exit 2, nothing started
                logger.error("invalid option: %s", exc)
                sys.exit(2)
            _sigterm_as_interrupt()
            environment.events.quitting.add_listener(_interrupted_is_no_error)
        if isinstance(environment.runner, WorkerRunner):
            slow_init_for_tests()
            # the name run.json's workers_lost and the per-worker table give it, in its own log
            logger.info("llm-locust worker %s (pid %d)", environment.runner.client_id, os.getpid())
            install_default_args_cache()  # a spawn message costs one parser build, not ~90
            WorkerClock(environment)  # records placed on the master's clock (client/clock.py)
            MasterSilenceWatch(environment)  # a master gone silent: quit in seconds, not Locust's minute
            environment.llm_record_shipper = RecordShipper(environment, None)  # --records-window: read per report
            install_cpu_reporting(environment)
            install_process_reporting(environment)
            install_ping_answer(environment)
            ClientLoadSampler(environment, RowShipper(environment, LOAD_KEY, None))
            announce_ready(environment)  # last: the master sends users only after this
        elif environment.parsed_options is not None and environment.parsed_options.run_dir:
            environment.llm_recorder = RunRecorder(environment)
        if not isinstance(environment.runner, WorkerRunner) and getattr(environment, "web_ui", None) is not None:
            _install_live_view(environment)
        wait_for_workers(environment)  # a master starting by itself: go when its workers are there
        # gevent's loop caches "now" between iterations: after seconds of imports here, a -t timer
        # Locust starts right after init would count from the stale time and fire that much early
        gevent.get_hub().loop.update_now()


def _interrupted_is_no_error(environment, **_kwargs) -> None:
    """Keep Locust's exit code what it was before ``interrupted`` requests were counted.

    Requests still in flight when a time limit stops the test are in Locust's failure table as
    ``interrupted`` (so its request count equals ``requests.csv``), but they are the test's doing,
    not the server's: when they are the only failures, the exit code is what Locust gives a run
    without failures (0, or 2 after an unhandled greenlet exception; ``locust/main.py``
    ``shutdown``), not ``--exit-code-on-error``. An exit code already set is left alone.
    """
    from locust import log

    from llm_locust.client.stream import INTERRUPTED_MESSAGE

    runner = environment.runner
    if environment.process_exit_code is not None or runner is None or runner.exceptions or not runner.errors:
        return
    marker = f"interrupted: {INTERRUPTED_MESSAGE}"
    if all(marker in str(entry.error) for entry in runner.errors.values()):
        environment.process_exit_code = 2 if log.unhandled_greenlet_exception else 0


def _sigterm_as_interrupt() -> None:
    """Make SIGTERM stop a master (or standalone) process the way Ctrl-C does.

    A headless Locust with a load shape runs the whole test before it installs its own SIGTERM
    handler, so until then SIGTERM killed it outright: no ``quitting``/``quit`` events, no final
    ``run.json``, and its workers left waiting for a master that was gone. Raising
    KeyboardInterrupt instead takes Locust's Ctrl-C path (stop the users, quit the workers, fire
    ``quit``). Locust replaces this handler with its own graceful one where it installs one.
    """
    import signal

    signal.signal(signal.SIGTERM, signal.default_int_handler)


def _install_live_view(environment) -> None:
    """The web UI's LLM tab (:mod:`llm_locust.live`), fed by the run's shipper and scraper.

    Without ``--run-dir`` there is no recorder: the tab gets a shipper of its own and a scraper
    that feeds only the tab (nothing is written).
    """
    from llm_locust.live import install_live_view

    recorder = getattr(environment, "llm_recorder", None)
    if recorder is not None:
        install_live_view(
            environment,
            shipper=recorder.shipper,
            scraper_sinks=recorder.server_sinks,
            requests_csv=recorder.requests_csv,
            scrape_meta=lambda: recorder.meta,
        )
        return
    scrapers: list[MetricsScraper] = []
    view = install_live_view(
        environment,
        shipper=RecordShipper(environment, None),
        scrape_meta=lambda: (
            {"metrics_urls": scrapers[0].urls, "metrics_duplicates": scrapers[0].duplicates} if scrapers else {}
        ),
    )

    def start(environment, **_kwargs) -> None:
        config = MasterConfig.from_options(environment.parsed_options)
        urls = metrics_urls(config, environment.host)
        if urls and not scrapers:
            scrapers.append(
                MetricsScraper(
                    urls,
                    config.scrape_interval_s,
                    view.add_server_rows,
                    auth_headers(config.api_key),
                    timeout_s=config.scrape_timeout_s,
                    max_bytes=config.scrape_max_bytes,
                )
            )
            scrapers[0].start()

    def stop(**_kwargs) -> None:
        for scraper in scrapers:
            scraper.stop()

    environment.events.test_start.add_listener(start)
    environment.events.quitting.add_listener(stop)
