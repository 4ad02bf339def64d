"""Shared pieces of the fault tests (issue 14): real Locust processes started by PID, and the
numbers the tests check, computed from the run directory's files independently of llm_locust."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from llm_locust.run.launcher import LocustRun, free_port

REPO = Path(__file__).resolve().parents[2]
LOCUSTFILES = REPO / "llm_locust" / "locustfiles"


def start_locust(run: LocustRun) -> tuple:
    """Start ``run``'s master and workers as separate processes: ``(master, [workers], logs)``."""
    import subprocess

    run.run_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    logs = [open(run.run_dir / "locust_master.log", "w")]
    master = subprocess.Popen(run.master_command(port), stdout=logs[0], stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL)  # fmt: skip
    workers = []
    for index in range(run.workers):
        logs.append(open(run.run_dir / f"locust_worker_{index}.log", "w"))
        workers.append(subprocess.Popen(run.worker_command(port), stdout=logs[-1], stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL))  # fmt: skip
    return master, workers, logs


def run_meta(run_dir: Path) -> dict:
    """``run.json``, or {} while it is not there (yet)."""
    try:
        return json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return {}


def wait_for_step(run_dir: Path, index: int, timeout_s: float = 60.0) -> dict:
    """The step ``index`` of ``run.json`` once it has started (polls the file)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        steps = run_meta(run_dir).get("shape", {}).get("steps", [])
        if len(steps) > index:
            return steps[index]
        time.sleep(0.2)
    raise AssertionError(f"step {index} did not start within {timeout_s} s")


def read_requests(run_dir: Path) -> pd.DataFrame:
    """``requests.csv`` with ``end_s`` (Unix s) added; error_kind "" for a success."""
    frame = pd.read_csv(run_dir / "requests.csv", keep_default_na=False, na_values=[""],
                        dtype={"error_kind": str, "worker_id": str})  # fmt: skip
    frame["error_kind"] = frame["error_kind"].fillna("")
    frame["end_s"] = frame["t_start_s"] + frame["e2e_ms"] / 1000.0
    return frame


def locust_request_count(run_dir: Path) -> int:
    """Locust's own total request count (its ``locust_stats.csv``, row "Aggregated")."""
    with open(run_dir / "locust_stats.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["Name"] == "Aggregated":
                return int(row["Request Count"])
    raise AssertionError("no Aggregated row in locust_stats.csv")


def mean_in_flight(requests: pd.DataFrame, start_s: float, end_s: float) -> float:
    """Time-average number of requests in flight over [start_s, end_s]: each request's overlap
    with the window, summed, over the window's length."""
    overlap = np.clip(np.minimum(requests["end_s"], end_s) - np.maximum(requests["t_start_s"], start_s), 0, None)
    return float(overlap.sum() / (end_s - start_s))
