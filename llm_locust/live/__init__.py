"""Watch a run live: an **LLM tab** in Locust's own web UI on the master.

What it shows, refreshed every 2 s: a table per request name (requests, failures by kind, TTFT
p50/p90/p99, TPOT p50/p90, ITL p99, decode rate p50, output tokens/s, mean output tokens); charts
over time of TTFT p50/p95, output tokens/s, client in-flight against the server's running and
waiting, and errors/s by kind, with the ladder's steps marked; the current step, the finished
steps' table and the critical concurrency so far (the post-run rule, :mod:`llm_locust.analysis.verdict.knee`, on the
steps finished so far); CSV downloads in Locust's "Download Data" tab.

How it plugs into Locust, and why this way
------------------------------------------
Locust 2.x offers three ways to extend its React web UI: the ``extended_tabs`` /
``extended_tables`` / ``extended_csv_files`` template arguments (an extra tab whose content is a
*table* fed by ``extended_stats`` in ``/stats/requests``), extra Flask routes on ``web_ui.app``,
and rebuilding the UI from the ``locust-ui`` npm library. The npm library is marked experimental,
trails the Python package (2.43.x behind Locust 2.47) and pins React 19 / MUI 7 peers: a custom
build would tie llm-locust to one Locust version and add a JavaScript toolchain to every install.

So the tab uses only what every Locust in the supported range (``locust>=2.43,<3``) documents:

1. the ``extended_*`` template arguments add the **LLM** tab and its CSV links, and an
   ``after_request`` hook adds ``extended_stats`` to ``/stats/requests`` — the live table is
   Locust's own table component, and its counts come from the same response as Locust's;
2. Flask routes under ``/llm/`` serve the data (``/llm/data``), the CSVs and a small
   dependency-free script (``static/llm_live.js``, SVG charts, no build step, no CDN), all behind
   ``web_ui.auth_required_if_enabled`` so ``--web-login`` protects them like Locust's routes;
3. the same hook adds the script to Locust's index page; when the LLM tab's table is on screen
   the script mounts the charts below it (it finds the table by its column keys and remounts
   when React re-renders). If a future Locust changed its markup so that the charts could not be
   placed, the tab still shows the live table and ``/llm/`` still shows every chart on a page of
   its own — nothing here depends on Locust's JavaScript internals to produce the data.

Data flow on the master: the request records that already ride ``report_to_master`` reach a
second sink of the run's :class:`~llm_locust.master.shipping.RecordShipper`; the scraper's samples
reach a second sink of the run's :class:`~llm_locust.master.scraper.MetricsScraper`
(:class:`~llm_locust.live.view.LiveView` explains the rest).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from llm_locust.live.view import LiveView
from llm_locust.live.web import install_routes

logger = logging.getLogger(__name__)

__all__ = ["LiveView", "install_live_view"]


def install_live_view(
    environment,
    *,
    shipper,
    scraper_sinks: list | None = None,
    requests_csv: Path | None = None,
    scrape_meta: Callable[[], dict] | None = None,
) -> LiveView:
    """Add the LLM tab to ``environment.web_ui`` and feed it from the run's record shipper.

    Parameters
    ----------
    environment : locust.env.Environment
        A master or standalone environment whose ``web_ui`` is created but not yet started
        (Locust's ``init`` event).
    shipper : llm_locust.master.shipping.RecordShipper
        The process's record shipper; the view becomes one of its sinks.
    scraper_sinks : list, optional
        The list of extra sinks the run's scraper hands every scrape to; the view appends its own.
    requests_csv : Path, optional
        The run directory's ``requests.csv``, offered for download.
    scrape_meta : callable returning dict, optional
        The scraped URLs in order (``metrics_urls``) and the duplicates the scraper found
        (``metrics_duplicates``), as run.json holds them: one server reached through two URLs is
        counted once (:class:`~llm_locust.live.server.LiveServerSeries`).

    Returns
    -------
    LiveView
        Also stored as ``environment.llm_live``.
    """
    view = LiveView(environment, scrape_meta=scrape_meta)
    shipper.add_sink(view.add_records)
    if scraper_sinks is not None:
        scraper_sinks.append(view.add_server_rows)
    options = environment.parsed_options
    base_path = (getattr(options, "web_base_path", "") or "") if options is not None else ""
    install_routes(environment.web_ui, view, requests_csv=requests_csv, base_path=base_path)
    environment.llm_live = view
    logger.debug("LLM tab installed on the web UI")
    return view
