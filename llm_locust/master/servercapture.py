"""What the master captures about the server besides ``/metrics``, for one run directory.

- ``--server-log PATH``: followed during the run (:class:`~llm_locust.master.logfollow.LogFollower`)
  into ``server.log`` + ``server_log_stamps.csv``;
- ``--server-log-cmd "CMD"``: the output of a command started on the master (``kubectl logs -f …``,
  ``ssh host tail -F …``) followed the same way (:class:`~llm_locust.master.logcmd.CommandLogFollower`);
- ``--server-log-format FILE``: copied as ``server_log_format.toml``;
- ``GET /props`` (llama.cpp) and ``GET /info`` (TGI): their JSON bodies, when the server answers
  them, in ``server_info.json`` (the slot count and batch settings the server reports), asked of
  the host and of every scraped ``/metrics`` endpoint's own ``scheme://host:port`` (each replica
  behind a gateway says its own slots);
- ``run.json`` gains ``server_log`` (the followed path) or ``server_log_cmd``, ``server_log_format`` and
  ``utc_offset_s`` (the master's UTC offset: the default zone of log stamps that carry none).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

import gevent
import gevent.pool

from llm_locust.analysis.schema import SERVER_INFO, SERVER_LOG_FORMAT
from llm_locust.auth import auth_headers
from llm_locust.master.config import MasterConfig, metrics_urls
from llm_locust.master.logcmd import CommandLogFollower
from llm_locust.master.logfollow import LogFollower
from llm_locust.master.scraper import ScrapeFailed, fetch_body

logger = logging.getLogger(__name__)

INFO_PATHS: tuple[str, ...] = ("/props", "/info")
"""Endpoints whose JSON says how the server is configured (llama.cpp, TGI)."""
INFO_TIMEOUT_S = 3.0


INFO_MAX_BYTES = 1024 * 1024
"""Largest ``/props`` or ``/info`` body read (llama.cpp's ``/props`` is ~2 KB): an endpoint that
answers every path with a huge body (a misconfigured exporter given as ``--server-metrics-url``)
costs the master no more than this."""


def fetch_server_info(host: str, *, headers: dict | None = None) -> dict:
    """``{url: JSON body}`` of the :data:`INFO_PATHS` that answer 200 with a JSON object, each read
    bounded in time (:data:`INFO_TIMEOUT_S`) and size (:data:`INFO_MAX_BYTES`) by the scraper's
    :func:`~llm_locust.master.scraper.fetch_body`."""
    found = {}
    for path in INFO_PATHS:
        url = host.rstrip("/") + path
        try:
            _, raw = fetch_body(url, headers=headers or {}, timeout_s=INFO_TIMEOUT_S, max_bytes=INFO_MAX_BYTES)
            body = json.loads(raw)
        except (ScrapeFailed, ValueError):
            continue
        if isinstance(body, dict):
            found[url] = body
    return found


def info_bases(config: MasterConfig, host: str | None) -> list[str]:
    """``scheme://host:port`` of every ``/metrics`` endpoint scraped that is not the host's own."""
    from urllib.parse import urlsplit

    own = host.rstrip("/") if host else ""
    bases = []
    for url in metrics_urls(config, host):
        parts = urlsplit(url)
        base = f"{parts.scheme}://{parts.netloc}"
        if parts.scheme and parts.netloc and base != own:
            bases.append(base)
    return list(dict.fromkeys(bases))


class ServerCapture:
    """Starts and stops the capture of one run (see the module docstring).

    Parameters
    ----------
    config : MasterConfig
        The run's :class:`~llm_locust.master.config.MasterConfig` (``server_log``,
        ``server_log_cmd``, ``server_log_format``, ``api_key``).
    host : str or None
        The target (for ``/props`` and ``/info``; also asked of each ``/metrics`` endpoint's base).
    run_dir : Path

    Raises
    ------
    ValueError
        ``--server-log`` names the run directory's own ``server.log``, or ``--server-log-cmd``
        cannot be split or its program is not found.
    OSError
        ``--server-log-format`` cannot be copied.
    """

    def __init__(self, config: MasterConfig, host: str | None, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.meta: dict = {"utc_offset_s": time.localtime().tm_gmtoff}
        self.follower: LogFollower | None = None  # a CommandLogFollower with --server-log-cmd
        source = config.server_log
        if source:
            self.follower = LogFollower(Path(source), self.run_dir)
            self.meta["server_log"] = str(source)
        command = getattr(config, "server_log_cmd", "")
        if command and self.follower is None:
            self.follower = CommandLogFollower(command, self.run_dir)
            self.meta["server_log_cmd"] = command
        fmt = config.server_log_format
        if fmt:
            from llm_locust.analysis.server.userformat import format_file_path  # pandas: only with a format file

            shutil.copyfile(format_file_path(fmt), self.run_dir / SERVER_LOG_FORMAT)  # a path or shipped name
            self.meta["server_log_format"] = str(fmt)
        self._headers = auth_headers(config.api_key)
        self._bases = list(dict.fromkeys([*([host.rstrip("/")] if host else []), *info_bases(config, host)]))
        self._info: gevent.Greenlet | None = None
        self._stopped = False

    def start(self) -> None:
        """Start following the log and fetch the server's info endpoints in the background."""
        if self.follower is not None:
            self.follower.start()
        if self._bases:
            self._info = gevent.spawn(self._write_info)

    def _write_info(self) -> None:
        found = gevent.pool.Group().map(lambda base: fetch_server_info(base, headers=self._headers), self._bases)
        info = {url: body for part in found for url, body in part.items()}
        if info:
            (self.run_dir / SERVER_INFO).write_text(json.dumps(info, indent=2) + "\n")

    def stop(self) -> None:
        """Copy the rest of the log and close it (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        if self._info is not None:
            self._info.join(timeout=2 * INFO_TIMEOUT_S * len(INFO_PATHS))  # the bases are asked at once
            self._info = None
        if self.follower is not None:
            self.follower.stop()
            logger.info("server log: %d lines copied from %s", self.follower.lines, self.follower.source)
            ended = getattr(self.follower, "ended_early", None)
            if ended is not None:  # run.json: the analysis says the log stops there
                self.meta["server_log_cmd_ended"] = ended
