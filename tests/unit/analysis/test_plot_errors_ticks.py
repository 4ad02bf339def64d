"""errors.png's y axis counts requests and log lines: whole-number ticks only, with failures and
without (an empty plot used to read 0.0, 0.2, ... 1.0)."""

from __future__ import annotations

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from llm_locust.analysis.report.plots import plot_errors


@pytest.mark.parametrize(
    "client_kinds, server_kinds",
    [
        (["", "", ""], ["", "", ""]),  # nothing failed
        (["", "timeout:1", "timeout:2 http_429:1"], ["", "", "preempted:1"]),  # a few, small counts
    ],
)
def test_error_ticks_are_whole_numbers(client_kinds, server_kinds):
    table = pd.DataFrame(
        {
            "target_users": [1.0, 2.0, 4.0],
            "error_kinds": client_kinds,
            "server_error_kinds": server_kinds,
            "failed_share": [0.0, 0.1, 0.3],
        }
    )
    ax = Figure().subplots()
    plot_errors(ax, table)
    FigureCanvasAgg(ax.figure).draw()
    low, high = ax.get_ylim()
    ticks = [t for t in ax.get_yticks() if low <= t <= high]
    assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks
    tallest = max(sum(int(n) for n in (p.split(":")[1] for p in k.split())) if k else 0 for k in client_kinds)
    assert high >= tallest
