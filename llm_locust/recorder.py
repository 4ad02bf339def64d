"""The master's side of a run: run directory, metrics scraper and run.json, tied to Locust's lifecycle.

Lifecycle (Locust events on the master or a standalone process):

- ``test_start``: open the run directory, write a first ``run.json``, start the scraper and the
  server capture (``--server-log`` followed, ``/props`` / ``/info``: :mod:`llm_locust.servercapture`).
- ``worker_report`` / ``request`` (via :class:`~llm_locust.shipping.RecordShipper`): append rows.
- ``quitting`` and ``quit``: stop the scraper, write the final ``run.json`` (end time, the shape's
  steps). Both, because on Ctrl-C Locust fires ``quitting`` before the workers' last reports
  arrive; rows are flushed as they come, so nothing measured is lost either way.

``run.json`` never contains the API key: the command line is stored with ``--api-key``'s value
replaced by ``***``.
"""

from __future__ import annotations

import logging
import platform
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from llm_locust.clientconfig import client_workload_meta
from llm_locust.clientreport import ClientReport, format_summary, install_cpu_reporting
from llm_locust.models import first_served_model
from llm_locust.options import add_options, validate_options
from llm_locust.prompts import load_prompts, prompt_set_sha256
from llm_locust.rundir import RunDirectory
from llm_locust.scraper import MetricsScraper
from llm_locust.servercapture import ServerCapture
from llm_locust.shipping import RecordShipper

logger = logging.getLogger(__name__)

REDACTED = "***"


def _is_api_key_flag(flag: str) -> bool:
    """``--api-key`` or an abbreviation argparse would accept for it (``--api-k``, ``--api``)."""
    return len(flag) >= len("--api") and "--api-key".startswith(flag)


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
        elif arg.startswith("--") and not sep and _is_api_key_flag(arg):
            out.append(arg)
            hide_next = True
        elif arg.startswith("--") and sep and _is_api_key_flag(flag):
            out.append(flag + "=" + REDACTED)
        elif secret and secret in arg:
            out.append(arg.replace(secret, REDACTED))
        else:
            out.append(arg)
    return out


def _versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("llm-locust", "locust", "gevent", "orjson", "prometheus_client"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            pass
    return found


def metrics_urls(options, host: str | None) -> list[str]:
    """Endpoints to scrape: ``--metrics-url`` (comma-separated), default ``HOST/metrics``, 'none'
    for none; then every ``--server-metrics-url`` (repeatable, comma-separated), without repeats."""
    value = options.metrics_url.strip()
    if value.lower() == "none":
        urls = []
    elif value:
        urls = [url.strip() for url in value.split(",") if url.strip()]
    else:
        urls = [host.rstrip("/") + "/metrics"] if host else []
    for item in getattr(options, "server_metrics_url", None) or []:
        urls += [url.strip() for url in item.split(",") if url.strip()]
    return list(dict.fromkeys(urls))


def parse_labels(pairs: list[str]) -> dict[str, str]:
    """``["quant=awq", "gpu=a10"]`` → ``{"quant": "awq", "gpu": "a10"}``.

    Raises
    ------
    ValueError
        A pair without ``=``.
    """
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--label must be KEY=VALUE, got {pair!r}")
        labels[key] = value
    return labels


class RunRecorder:
    """Writes one run directory from a master or standalone Locust process.

    Parameters
    ----------
    environment : locust.env.Environment
        The process's environment; ``parsed_options.run_dir`` names the folder.
    """

    def __init__(self, environment) -> None:
        self.environment = environment
        self.options = environment.parsed_options
        self.labels = parse_labels(self.options.label)
        self.run_dir: RunDirectory | None = None
        self.scraper: MetricsScraper | None = None
        self.meta: dict = {}
        self.server_sinks: list = []  # also handed every scrape (e.g. the web UI's live view)
        self.capture: ServerCapture | None = None  # server log, /props, /info (servercapture.py)
        self.shipper = RecordShipper(environment, self._write_requests)
        self.client_report = ClientReport(environment)
        self.shipper.add_sink(self.client_report.add_rows)
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

    def metrics_urls(self) -> list[str]:
        """Endpoints to scrape: ``--metrics-url`` (comma-separated), default ``HOST/metrics``; [] for 'none'."""
        return metrics_urls(self.options, self.environment.host)

    @property
    def requests_csv(self) -> Path:
        """Path of the run directory's ``requests.csv`` (it exists from ``test_start`` on)."""
        return Path(self.options.run_dir) / "requests.csv"

    def _on_test_start(self, environment, **_kwargs) -> None:
        if self.run_dir is not None:  # a second test in the same process (web UI restart): keep the first dir
            return
        self.run_dir = RunDirectory(self.options.run_dir)
        prompts = load_prompts(self.options.prompts_file or None)
        model = self.options.model
        if not model and environment.host:
            try:
                model = first_served_model(environment.host, api_key=self.options.api_key)
            except Exception as exc:  # the run goes on; run.json just lacks the name
                logger.warning("could not ask the server for its model name: %s", exc)
        self.meta = {
            "started_at_s": time.time(),
            "ended_at_s": None,
            "command_line": redact_argv(sys.argv, self.options.api_key or ""),
            "host": environment.host,
            "model": model,
            "workload": {
                "protocol": self.options.protocol,
                "max_tokens": self.options.max_tokens,
                "ignore_eos": self.options.ignore_eos,
                "temperature": self.options.temperature,
                "prompt_set_sha256": prompt_set_sha256(prompts),
                "prompts": len(prompts),
                **client_workload_meta(self.options),
            },
            "shape": {"kind": "none", "steps": []},
            "metrics_urls": self.metrics_urls(),
            "scrape_interval_s": self.options.scrape_interval_s,
            "workers": [],
            "versions": _versions(),
            "labels": self.labels,
        }
        self.capture = ServerCapture(self.options, environment.host, self.run_dir.path)
        self.meta.update(self.capture.meta)
        self.capture.start()
        self._refresh_meta()
        if self.meta["metrics_urls"]:
            headers = {"Authorization": f"Bearer {self.options.api_key}"} if self.options.api_key else {}
            self.scraper = MetricsScraper(
                self.meta["metrics_urls"], self.options.scrape_interval_s, self.run_dir.server_metrics.write_rows, headers
            )
            self.scraper.extra_sinks = self.server_sinks
            self.scraper.start()

    def _on_spawning_complete(self, user_count, **_kwargs) -> None:
        if self.run_dir is not None:  # a ladder step began: record its start in run.json now
            self._refresh_meta()

    def _report_user_errors(self) -> None:
        """Exceptions raised in users (an ``on_start`` that failed, on any worker: Locust sends them
        to the master) go to the master log once each and to ``run.json`` (``user_errors``)."""
        exceptions = getattr(self.environment.runner, "exceptions", None) or {}
        seen = self.meta.setdefault("user_errors", [])
        logged = {error["msg"] for error in seen}
        for row in list(exceptions.values()):
            message = redact_argv([str(row["msg"])], self.options.api_key or "")[0]
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
        self.run_dir.write_meta(self.meta)

    def _finish(self) -> None:
        if self.run_dir is None:
            return
        if self.scraper is not None:
            self.scraper.stop()
        if self.capture is not None:
            self.capture.stop()
        self.meta["ended_at_s"] = time.time()
        self._refresh_meta()

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
            self._write_client_report()
            self.run_dir.close()

    def _write_client_report(self) -> None:
        """``client_report.json`` (see :mod:`llm_locust.clientreport`), and its table on stdout."""
        try:
            report = self.client_report.write(self.run_dir.path / "client_report.json", self.run_dir.path / "requests.csv")
        except Exception:  # the run's data is on disk already; a report failure must not hide it
            logger.exception("could not write client_report.json")
            return
        print(format_summary(report), flush=True)


def install(events) -> None:
    """Register llm-locust with Locust: its options, and on ``init`` the recorder or the shipper.

    Called once by :mod:`llm_locust.plugin` when a locustfile imports it.
    """

    @events.init_command_line_parser.add_listener
    def _add_options(parser, **_kwargs) -> None:
        add_options(parser)

    @events.init.add_listener
    def _on_init(environment, **_kwargs) -> None:
        from locust.runners import WorkerRunner

        if not isinstance(environment.runner, WorkerRunner) and environment.parsed_options is not None:
            try:
                validate_options(environment.parsed_options)
            except ValueError as exc:  # plain `locust -f`: one clear line, exit 2, nothing started
                logger.error("invalid option: %s", exc)
                sys.exit(2)
            _sigterm_as_interrupt()
        if isinstance(environment.runner, WorkerRunner):
            RecordShipper(environment, None)
            install_cpu_reporting(environment)
        elif environment.parsed_options is not None and environment.parsed_options.run_dir:
            environment.llm_recorder = RunRecorder(environment)
        if not isinstance(environment.runner, WorkerRunner) and getattr(environment, "web_ui", None) is not None:
            _install_live_view(environment)


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
        install_live_view(environment, shipper=recorder.shipper, scraper_sinks=recorder.server_sinks,
                          requests_csv=recorder.requests_csv)
        return
    view = install_live_view(environment, shipper=RecordShipper(environment, None))
    scrapers: list[MetricsScraper] = []

    def start(environment, **_kwargs) -> None:
        urls = metrics_urls(environment.parsed_options, environment.host)
        if urls and not scrapers:
            api_key = environment.parsed_options.api_key
            headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
            scrapers.append(MetricsScraper(urls, environment.parsed_options.scrape_interval_s,
                                           view.add_server_rows, headers))
            scrapers[0].start()

    def stop(**_kwargs) -> None:
        for scraper in scrapers:
            scraper.stop()

    environment.events.test_start.add_listener(start)
    environment.events.quitting.add_listener(stop)
