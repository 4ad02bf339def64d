"""``summary.md``'s per-worker section: requests, CPU and missing spells of each load worker.

Only for a run with more than one worker (one worker's row would repeat the run's figures).
"""

from __future__ import annotations

from llm_locust.analysis.perstep.workers import (
    WORKER_HEADER,
    missing_intervals,
    worker_records,
    worker_table,
    worker_text_rows,
)
from llm_locust.analysis.rundir.reader import Run


def workers_markdown(run: Run) -> list[str]:
    """``summary.md`` lines: a heading, the per-worker table (:func:`llm_locust.analysis.perstep.workers.worker_table`,
    times since the run's start) and a line per worker that sent no request or went missing;
    none for a run with fewer than two workers.

    Parameters
    ----------
    run : llm_locust.analysis.rundir.reader.Run
        The loaded run directory (``requests``, ``client_load``, ``meta``, start and end).
    """
    table = worker_table(run.requests, run.client_load, run.meta, run.ended_at_s)
    if len(table) < 2:
        return []
    records = worker_records(table, missing_intervals(run.meta, run.ended_at_s))
    rows = worker_text_rows(records, run.started_at_s)
    lines = [
        "## Load workers",
        "",
        "| " + " | ".join(WORKER_HEADER) + " |",
        "|" + "|".join("---" if i < 2 else "---:" for i in range(len(WORKER_HEADER))) + "|",
        *["| " + " | ".join(row) + " |" for row in rows],
        "",
        "Requests from `requests.csv` (failed: any error kind but `interrupted`, cut by the stop); CPU in percent of one core, mean and "
        "max of the worker's ~1 s intervals in `client_load.csv`; first/last record and missing "
        "spells (no heartbeat reached the master: run.json `workers_missing`) in seconds since the "
        "run's start.",
        "",
    ]
    idle = [row["worker"] for row in records if row["requests"] == 0]
    if idle:
        lines += [f"- **{len(idle)} worker(s) sent no request**: " + ", ".join(idle), ""]
    gone = [row for row in records if row["missing"]]
    for row in gone:
        total = sum(spell["missing_s"] for spell in row["missing"])
        lines.append(f"- **worker {row['worker']} was missing {total:.1f} s**: the steps it overlaps fell "
                     "short of their target concurrency while its users were gone (see the verdict)")  # fmt: skip
    return lines + ([""] if gone else [])
