"""latency.png's y axis: every plotted value has a labelled tick near enough to read it off
(within a factor of 2 on a log axis), also when TTFT is in seconds and TPOT ~25 ms."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from llm_locust.analysis.report.plots import plot_latency


def _labelled_ticks(ax) -> np.ndarray:
    """Y values that carry a label in the drawn figure."""
    FigureCanvasAgg(ax.figure).draw()
    low, high = ax.get_ylim()
    return np.array(
        sorted(
            tick.get_loc()
            for tick in ax.yaxis.get_major_ticks()
            if tick.label1.get_visible() and tick.label1.get_text() and low <= tick.get_loc() <= high
        )
    )


@pytest.mark.parametrize(
    "ttft_ms, tpot_ms",
    [
        ([180.0, 260.0, 900.0, 2400.0, 5200.0], [21.0, 22.5, 24.0, 26.0, 28.0]),  # log axis
        ([30.0, 35.0, 40.0, 60.0, 90.0], [21.0, 22.5, 24.0, 26.0, 28.0]),  # linear axis
    ],
)
def test_every_latency_value_is_readable(ttft_ms, tpot_ms):
    table = pd.DataFrame(
        {
            "target_users": [1.0, 2.0, 4.0, 8.0, 16.0],
            "ttft_p50_ms": ttft_ms,
            "ttft_p95_ms": [v * 1.3 for v in ttft_ms],
            "tpot_p50_ms": tpot_ms,
        }
    )
    ax = Figure(figsize=(9, 5.5)).add_subplot()
    plot_latency(ax, table)
    ticks = _labelled_ticks(ax)
    assert len(ticks) >= 2
    for value in np.concatenate([ttft_ms, [v * 1.3 for v in ttft_ms], tpot_ms]):
        if ax.get_yscale() == "log":  # a labelled tick within a factor of 2 (old: 10, 100)
            assert np.abs(np.log(ticks / value)).min() <= np.log(2.0), (value, ticks)
        else:
            span = ax.get_ylim()[1] - ax.get_ylim()[0]
            assert np.abs(ticks - value).min() <= 0.15 * span, (value, ticks)
