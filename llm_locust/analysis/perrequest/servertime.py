"""TTFT split into the server's own account and the rest, from the ``server_*`` columns of
``requests.csv`` (the timings the server sent with each answer: llama.cpp's ``timings``, a
``--protocol-format`` file's ``[response.timings]``).

Per successful request with a server prefill time (``server_prompt_ms``), ms:

- ``server_ttft_ms = server_queue_ms + server_prompt_ms``: what the server says it spent before
  the first token, queued and prefilling (``server_queue_ms`` counted as 0 where the server
  does not report it: llama.cpp's ``timings`` leave out the wait for a free slot, which then
  lands in the outside part);
- ``ttft_outside_ms = ttft_ms - server_ttft_ms``: network, the client, and the server's work
  outside its timings (HTTP, tokenising; the unreported queue);
- ``e2e_outside_ms = e2e_ms - (server_queue_ms + server_prompt_ms + server_decode_ms)``: the
  whole request's time outside the server's timings, the measured network-and-overhead time
  (with no queue it is the same overhead as ``ttft_outside_ms``, less the last token's trip).

Per step (requests completed in the steady window, as in :func:`llm_locust.analysis.perstep.table.step_table`),
*means* (not medians, so the parts add up: ``ttft_server_queue_ms + ttft_server_prefill_ms +
ttft_outside_ms == ttft_timed_mean_ms``) over the requests with server timings and a TTFT;
``e2e_outside_ms`` over those with a decode time too; ``server_timed`` counts them. NaN when
none (a server that sends no timings); ``ttft_server_queue_ms`` NaN when no request of the step
reported a queue time (it then adds 0 to the sum).

Server times are the server's clock, client times the client's: both are durations, so no
clock offset enters.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from llm_locust.analysis.perrequest.metrics import end_time_s

SPLIT_COLUMNS: tuple[str, ...] = (
    "server_timed",
    "ttft_timed_mean_ms",
    "ttft_server_queue_ms",
    "ttft_server_prefill_ms",
    "ttft_outside_ms",
    "e2e_outside_ms",
)
"""Step-table columns :func:`ttft_split_table` adds."""


def request_split(requests: pd.DataFrame) -> pd.DataFrame:
    """Per request: ``server_ttft_ms``, ``ttft_outside_ms``, ``e2e_outside_ms`` (module docstring).

    Parameters
    ----------
    requests : pandas.DataFrame
        ``requests.csv`` rows with ``ttft_ms``, ``e2e_ms`` and the ``server_*`` columns.

    Returns
    -------
    pandas.DataFrame
        float64 columns, same index; NaN where the server sent no prefill time.

    >>> r = pd.DataFrame({"ttft_ms": [130.0], "e2e_ms": [540.0], "server_queue_ms": [float("nan")],
    ...                   "server_prompt_ms": [100.0], "server_decode_ms": [400.0]})
    >>> request_split(r).iloc[0].tolist()
    [100.0, 30.0, 40.0]
    """
    queue = requests["server_queue_ms"].astype("float64").fillna(0.0)
    prompt = requests["server_prompt_ms"].astype("float64")
    server_ttft = queue + prompt  # NaN where no prefill time
    return pd.DataFrame(
        {
            "server_ttft_ms": server_ttft,
            "ttft_outside_ms": requests["ttft_ms"].astype("float64") - server_ttft,
            "e2e_outside_ms": requests["e2e_ms"].astype("float64")
            - server_ttft
            - requests["server_decode_ms"].astype("float64"),
        },
        index=requests.index,
    )


def ttft_split_table(requests: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """Per step: :data:`SPLIT_COLUMNS` (module docstring), indexed like ``windows``.

    Parameters
    ----------
    requests : pandas.DataFrame
        ``requests.csv`` rows (:attr:`llm_locust.analysis.rundir.reader.Run.requests`).
    windows : pandas.DataFrame
        :func:`llm_locust.analysis.perstep.table.step_windows` output.

    Returns
    -------
    pandas.DataFrame
        float64 columns.
    """
    ok = requests[requests["error_kind"].astype(str) == ""]
    split = request_split(ok)
    t_end = end_time_s(ok)
    timed = split["server_ttft_ms"].notna() & ok["ttft_ms"].notna()
    rows = []
    for window in windows.itertuples(index=False):
        inside = (t_end >= float(window.window_start_s)) & (t_end < float(window.window_end_s)) & timed
        if not inside.any():
            rows.append((0.0, *[np.nan] * (len(SPLIT_COLUMNS) - 1)))
            continue
        part = split[inside]
        queue = ok.loc[inside, "server_queue_ms"].astype("float64")
        queue_mean = float(queue.fillna(0.0).mean()) if queue.notna().any() else np.nan
        rows.append(
            (
                float(inside.sum()),
                float(ok.loc[inside, "ttft_ms"].mean()),
                queue_mean,
                float(ok.loc[inside, "server_prompt_ms"].mean()),
                float(part["ttft_outside_ms"].mean()),
                float(part["e2e_outside_ms"].mean()),
            )
        )
    return pd.DataFrame(rows, columns=list(SPLIT_COLUMNS), index=windows.index, dtype="float64")
