"""Rule ``hidden_queue``: requests the client has in flight that the server's counters do not show.

The client counts a request in flight from its send to its last byte; the server's running +
waiting counts it once its scheduler has it. When the client holds clearly more than the
server shows, the rest wait somewhere the scraped counters do not reach: the accept backlog, a
gateway or proxy in front of the server, a static batcher's queue for its next batch (when its
log maps only the running batch), or replicas that were not scraped. That is a server-side
queue, never the load client's doing (the playbook: "客户端显示并发已经拉到目标值，但服务端在途
请求数明显更低，那么请求可能堆积在连接建立或排队阶段"); the client is blamed only on client
evidence (:mod:`llm_locust.analysis.verdict.client`). Written here: the field's rule, no library has it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from llm_locust.analysis.loadaxis import load_axis
from llm_locust.analysis.verdict.types import BottleneckKind, Evidence, Rules

WHERE = (
    "the accept backlog, a gateway or proxy in front of the server, a static batcher's queue for its "
    "next batch, or replicas that were not scraped"
)
"""Where requests the server's counters do not show can wait."""


def hidden_inflight(table: pd.DataFrame, rules: Rules) -> pd.Series:
    """Requests in flight at the client that the server's running + waiting did not show, per step.

    ``client_inflight - (server_running + server_waiting)`` where that is at least
    ``rules.min_server_follow_gap`` requests and the server shows less than
    ``rules.min_server_follow_ratio`` of the client's in-flight; 0.0 where it is not; NaN
    without server samples.

    Parameters
    ----------
    table : pandas.DataFrame
        Step table with ``client_inflight``, ``server_running``, ``server_waiting`` (requests).

    Returns
    -------
    pandas.Series
        float64 requests, same index.

    Examples
    --------
    >>> from llm_locust.analysis.verdict.types import RULES
    >>> t = pd.DataFrame({"client_inflight": [4.0, 16.0, 4.0], "server_running": [4.0, 8.0, np.nan],
    ...                   "server_waiting": [0.0, 0.0, np.nan]})
    >>> hidden_inflight(t, RULES).tolist()
    [0.0, 8.0, nan]
    """
    server = table["server_running"].astype(float) + table["server_waiting"].astype(float)
    client = table["client_inflight"].astype(float)
    gap = client - server
    shows_less = (server < rules.min_server_follow_ratio * client) & (gap >= rules.min_server_follow_gap)
    return gap.where(shows_less, 0.0).where(np.isfinite(server)).astype("float64")


def hidden_queue(usable: pd.DataFrame, rules: Rules) -> Evidence:
    """Rule ``hidden_queue``: some usable step has requests the server's counters do not show.

    Holds at the first usable step whose ``hidden_inflight`` column (:func:`hidden_inflight`) is
    > 0; its values name that step, the client's and the server's in-flight and the hidden
    requests. A note beside the kinds (like ``client_load_missing``): the knee counts those
    requests as waiting, and the verdict names where they can be.
    """
    kind = BottleneckKind.UNDETERMINED
    if usable.empty or "hidden_inflight" not in usable.columns:
        return Evidence(rule="hidden_queue", kind=kind, holds=False, text="no usable step to compare")
    axis = load_axis(usable)
    ordered = usable.sort_values(axis.column, kind="stable")
    hidden = ordered[ordered["hidden_inflight"].astype(float) > 0]
    if hidden.empty:
        return Evidence(
            rule="hidden_queue",
            kind=kind,
            holds=False,
            text="the server's running + waiting followed the client's in-flight at every usable step",
        )
    row = hidden.iloc[0]
    counted = row["server_waiting_counted"] if "server_waiting_counted" in row.index else row["server_waiting"]
    server = float(row["server_running"]) + float(counted)  # as the counters showed it, hidden ones not added
    values = {
        axis.value_key: float(row[axis.column]),
        "client_inflight": float(row["client_inflight"]),
        "server_inflight": server,
        "hidden_requests": float(row["hidden_inflight"]),
        "hidden_steps": float(len(hidden)),
    }
    units = {
        axis.value_key: axis.value_unit,
        "client_inflight": "requests",
        "server_inflight": "requests",
        "hidden_requests": "requests",
        "hidden_steps": "steps",
    }
    text = (
        f"from {axis.fmt(row[axis.column])} the client had {row['client_inflight']:.2f} requests in flight and the "
        f"server's counters showed {server:.2f} (running + waiting): {row['hidden_inflight']:.2f} wait where the "
        f"scraped counters do not see them ({WHERE}); counted as waiting"
    )
    return Evidence(rule="hidden_queue", kind=kind, holds=True, values=values, units=units, text=text)
