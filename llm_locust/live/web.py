"""Flask side of the LLM tab: data routes, CSV downloads, the tab's table and its charts' script.

Everything is registered on Locust's own Flask app (``web_ui.app``) under ``<web-base-path>/llm/``
and every route is wrapped in ``web_ui.auth_required_if_enabled``, so ``--web-login`` protects
the tab's data exactly as it protects Locust's own.

Routes (all ``GET``):

``/llm/``             the charts page on its own (the same script, outside Locust's React app)
``/llm/data``         JSON snapshot of :meth:`~llm_locust.live.view.LiveView.snapshot`
``/llm/static/<f>``   ``llm_live.js`` / ``llm_live.css``
``/llm/stats.csv``    the per-name live table
``/llm/series.csv``   the time series, one row per bucket, server figures time-averaged per bucket
``/llm/steps.csv``    the finished steps' table (the analysis' columns)
``/llm/requests.csv`` the run directory's ``requests.csv`` (with ``--run-dir`` only)

Hooks on Locust's pages: ``/stats/requests`` gets ``extended_stats`` (the rows of the LLM tab's
table, computed in the same request, so they agree with Locust's counts in that response), and
Locust's index page gets one ``<link>`` and one ``<script>`` tag before ``</body>``.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from flask import Blueprint, Response, make_response, request, send_file, send_from_directory

from llm_locust.analysis.server.series import time_average
from llm_locust.jsonsafe import json_safe
from llm_locust.live.ladder import step_columns
from llm_locust.live.records import TABLE_COLUMNS

TAB_KEY = "llm"
"""Key of the LLM tab (``?tab=llm``) and of its entry in ``extended_stats``."""
STATIC = Path(__file__).resolve().parent / "static"
STATIC_FILES = frozenset({"llm_live.js", "llm_live.css"})

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>LLM - Locust</title><link rel="icon" href="data:,"><link rel="stylesheet" href="./static/llm_live.css"></head>
<body class="llm-standalone"><div id="llm-live-root"></div>
<script src="./static/llm_live.js"></script></body></html>
"""
"""The standalone charts page (``/llm/``)."""

INJECT = (
    '<link rel="stylesheet" href="./llm/static/llm_live.css"><script defer src="./llm/static/llm_live.js"></script>'
)
"""Added to Locust's index page: mounts the charts into the LLM tab."""


def template_args(*, with_requests_csv: bool) -> dict:
    """The ``extended_*`` template arguments of Locust's web UI that add the LLM tab."""
    files = [
        {"href": "./llm/stats.csv", "title": "Download LLM stats CSV (per request name)"},
        {"href": "./llm/series.csv", "title": "Download LLM time series CSV"},
        {"href": "./llm/steps.csv", "title": "Download LLM ladder steps CSV"},
    ]
    if with_requests_csv:
        files.append({"href": "./llm/requests.csv", "title": "Download LLM requests CSV (one row per request)"})
    return {
        "extended_tabs": [{"title": "LLM", "key": TAB_KEY}],
        "extended_tables": [{"key": TAB_KEY, "structure": [{"key": k, "title": t} for k, t in TABLE_COLUMNS]}],
        "extended_csv_files": files,
    }


def _csv_response(header: list[str], rows: list[list], filename: str) -> Response:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerows([["" if v is None else v for v in row] for row in rows])
    response = make_response(buffer.getvalue())
    response.headers["Content-Type"] = "text/csv; charset=utf-8"
    response.headers["Content-Disposition"] = f"attachment;filename={filename}"
    return response


def series_rows(snapshot: dict, server) -> tuple[list[str], list[list]]:
    """The time series as CSV: one row per bucket end ``t_s``; server running/waiting/KV usage
    time-averaged over the bucket (:func:`llm_locust.analysis.server.series.time_average`)."""
    series, bucket_s = snapshot["series"], snapshot["bucket_s"]
    kinds = sorted(series["errors_per_s"])
    header = [
        "t_s",
        "elapsed_s",
        "ttft_p50_ms",
        "ttft_p95_ms",
        "output_tps",
        "request_rps",
        "error_rate_per_s",
        "client_inflight",
        "server_running",
        "server_waiting",
        "kv_usage_ratio",
        *[f"errors_per_s_{kind}" for kind in kinds],
    ]
    rows = []
    for i, t_s in enumerate(series["t_s"]):
        averages = [
            time_average(server["t_s"], server[c], t_s - bucket_s, t_s) if not server.empty else math.nan
            for c in ("running", "waiting", "kv_usage_ratio")
        ]
        rows.append(
            [
                t_s,
                round(t_s - snapshot["t0_s"], 3),
                *[series[c][i] for c in header[2:8]],
                *[json_safe(round(a, 4)) for a in averages],
                *[series["errors_per_s"][kind][i] for kind in kinds],
            ]
        )
    return header, rows


def install_routes(web_ui, view, *, requests_csv: Path | None, base_path: str = "") -> None:
    """Register the LLM tab on ``web_ui`` (a :class:`locust.web.WebUI` not yet started).

    Parameters
    ----------
    web_ui : locust.web.WebUI
    view : llm_locust.live.view.LiveView
    requests_csv : Path or None
        The run directory's ``requests.csv`` to offer for download, if any.
    base_path : str
        Locust's ``--web-base-path`` ("" for none).
    """
    auth = web_ui.auth_required_if_enabled
    blueprint = Blueprint("llm_live", __name__, url_prefix=f"{base_path.rstrip('/')}/{TAB_KEY}")

    @blueprint.route("/")
    @auth
    def page() -> Response:
        return make_response(PAGE)

    @blueprint.route("/data")
    @auth
    def data() -> Response:
        response = make_response(json.dumps(json_safe(view.snapshot()), allow_nan=False))
        response.headers["Content-Type"] = "application/json"
        response.headers["Cache-Control"] = "no-store"
        return response

    @blueprint.route("/static/<name>")
    @auth
    def static(name: str) -> Response:
        if name not in STATIC_FILES:
            return make_response("not found", 404)
        response = send_from_directory(STATIC, name, max_age=0)
        return response

    @blueprint.route("/stats.csv")
    @auth
    def stats_csv() -> Response:
        keys = [k for k, _ in TABLE_COLUMNS]
        return _csv_response(keys, [[row.get(k) for k in keys] for row in view.table()], "llm_stats.csv")

    @blueprint.route("/series.csv")
    @auth
    def series_csv() -> Response:
        header, rows = series_rows(view.snapshot(), view.server.frame())
        return _csv_response(header, rows, "llm_series.csv")

    @blueprint.route("/steps.csv")
    @auth
    def steps_csv() -> Response:
        rows = view.snapshot()["steps_table"]
        columns = step_columns(rows)
        return _csv_response(columns, [[row.get(k) for k in columns] for row in rows], "llm_steps.csv")

    @blueprint.route("/requests.csv")
    @auth
    def requests_csv_route() -> Response:
        if requests_csv is None or not requests_csv.is_file():
            return make_response("No run directory: start Locust with --run-dir to record requests.csv", 404)
        return send_file(
            requests_csv, mimetype="text/csv", as_attachment=True, download_name="llm_requests.csv", max_age=0
        )

    web_ui.app.register_blueprint(blueprint)
    web_ui.template_args.update(template_args(with_requests_csv=requests_csv is not None))

    @web_ui.app.after_request
    def extend_locust_pages(response: Response) -> Response:
        endpoint = request.endpoint or ""
        if response.status_code != 200 or response.direct_passthrough:
            return response
        if endpoint in ("locust.request_stats", "request_stats") and response.is_json:
            # Locust memoizes this response object for ~2 s: extend it once, so the LLM rows and
            # Locust's own rows in one response always come from the same instant.
            if not getattr(response, "_llm_extended", False):
                payload = response.get_json()
                payload["extended_stats"] = [{"key": TAB_KEY, "data": json_safe(view.table())}]
                response.set_data(json.dumps(payload, allow_nan=False))
                response._llm_extended = True  # type: ignore[attr-defined]  # a mark on the memoized object
        elif endpoint in ("locust.index", "index") and response.mimetype == "text/html":
            page = response.get_data(as_text=True)
            if INJECT not in page and "</body>" in page:
                response.set_data(page.replace("</body>", INJECT + "</body>", 1))
        return response
