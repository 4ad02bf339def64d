"""Tokens per streamed chunk, and per-token ITL beside inter-chunk latency, per step.

A server doing speculative decoding or MTP, or one that batches its flushes, sends several
tokens in one SSE chunk: then the gap between chunks is not the time per token. Per step
(requests completed in the steady window, as :func:`llm_locust.analysis.perstep.table.step_table` counts them;
successes only):

- ``tokens_per_chunk_mean`` = sum of ``output_tokens`` / sum of ``content_events`` (token
  events), tokens per chunk; 1.0 for a server that streams token by token. NaN without chunks.
- ``multi_token_chunk_share``: share of the step's requests with more output tokens than
  chunks (``output_tokens > content_events``), 0-1.
- ``itl_p50_ms``, ``itl_p99_ms``: per-token ITL (each gap divided by the tokens its chunk
  carried, :func:`llm_locust.analysis.perrequest.itl.request_itl`), token-weighted percentiles, ms.
- ``chunk_gap_p50_ms``, ``chunk_gap_p99_ms``: inter-chunk latency (the raw gaps,
  :func:`llm_locust.analysis.perrequest.itl.chunk_gaps_ms`), ms.

The ITL needs ``token_times_us``, which the step analysis leaves unread
(:data:`llm_locust.analysis.rundir.reader.LAZY_REQUEST_COLUMNS`): it is read from ``requests.csv`` a block at a
time (:func:`llm_locust.analysis.rundir.columnar.iter_request_frames`: from ``requests.arrow`` when
it matches the CSV) into one :class:`llm_locust.analysis.perrequest.itlpool.PooledItl` per
window; a run directory without the column (or with blocks the typed reader refuses) gets NaN
ITL columns, never a wrong number.

A run is flagged (:func:`multi_token_line`) when its chunks carry more than
:data:`MULTI_TOKEN_MEAN` tokens on average: its TPOT and ITL count tokens, its inter-chunk
latency is several tokens' time. Which tokens each chunk carried is known when the server
states it (vLLM's ``continuous_usage_stats``, ``--continuous-usage true``; TGI's one token per
event: ``requests.csv`` ``event_tokens``); otherwise the first chunk counts one token and the
others share the rest evenly (:mod:`llm_locust.analysis.perrequest.itl`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from llm_locust.analysis.perrequest.itlpool import ITL_COLUMNS, PooledItl
from llm_locust.analysis.perrequest.metrics import end_time_s, succeeded

CHUNK_COLUMNS: tuple[str, ...] = (
    "tokens_per_chunk_mean",
    "multi_token_chunk_share",
    "itl_p50_ms",
    "itl_p99_ms",
    "chunk_gap_p50_ms",
    "chunk_gap_p99_ms",
)
"""Step-table columns :func:`chunk_table` adds."""

MULTI_TOKEN_MEAN = 1.05
"""Mean tokens per chunk above which a run is flagged as sending multi-token chunks."""

_READ_COLUMNS: tuple[str, ...] = ("t_start_s", *ITL_COLUMNS)


def chunk_table(requests: pd.DataFrame, windows: pd.DataFrame, requests_csv: Path | None = None) -> pd.DataFrame:
    """Per step: :data:`CHUNK_COLUMNS` (module docstring), indexed like ``windows``.

    Parameters
    ----------
    requests : pandas.DataFrame
        ``requests.csv`` rows (:attr:`llm_locust.analysis.rundir.reader.Run.requests`): ``t_start_s``, ``e2e_ms``,
        ``error_kind``, ``output_tokens``, ``content_events``; with ``token_times_us`` (and
        ``event_tokens``) the ITL is computed from them.
    windows : pandas.DataFrame
        :func:`llm_locust.analysis.perstep.table.step_windows` output.
    requests_csv : Path, optional
        The file to read ``token_times_us`` from when ``requests`` lacks it.

    Returns
    -------
    pandas.DataFrame
        float64 columns :data:`CHUNK_COLUMNS`.

    >>> r = pd.DataFrame({"t_start_s": [0.0, 0.0], "e2e_ms": [500.0, 600.0], "error_kind": ["", ""],
    ...                   "ttft_ms": [100.0, 100.0], "output_tokens": [6.0, 4.0], "content_events": [2.0, 4.0],
    ...                   "token_times_us": ["100000 400000", "100000 200000 300000 400000"],
    ...                   "event_tokens": ["3 3", ""]})
    >>> w = pd.DataFrame({"window_start_s": [0.0], "window_end_s": [1.0]})
    >>> chunk_table(r, w).iloc[0].round(3).tolist()
    [1.667, 0.5, 100.0, 300.0, 100.0, 294.0]
    """
    ok = requests[succeeded(requests["error_kind"])]
    t_end = end_time_s(ok).to_numpy(float)
    tokens = ok["output_tokens"].to_numpy(float)
    chunks = ok["content_events"].to_numpy(float) if "content_events" in ok.columns else np.full(len(ok), np.nan)
    pools = [PooledItl() for _ in range(len(windows))]
    readable = True
    if "token_times_us" in requests.columns:
        for k, inside in enumerate(_inside(t_end, windows)):
            pools[k].add(ok[inside])
    elif requests_csv is not None:
        readable = _pool_from_file(requests_csv, windows, pools)
    else:
        readable = False
    rows = []
    for k, inside in enumerate(_inside(t_end, windows)):
        has_chunks = inside & (chunks > 0)
        total_chunks = float(chunks[has_chunks].sum())
        mean = float(tokens[has_chunks].sum()) / total_chunks if total_chunks > 0 else np.nan
        share = float((tokens[has_chunks] > chunks[has_chunks]).mean()) if has_chunks.any() else np.nan
        summary = pools[k].summary() if readable else {}
        rows.append(
            (
                mean,
                share,
                summary.get("itl_p50_ms", np.nan),
                summary.get("itl_p99_ms", np.nan),
                summary.get("chunk_gap_p50_ms", np.nan),
                summary.get("chunk_gap_p99_ms", np.nan),
            )
        )
    return pd.DataFrame(rows, columns=list(CHUNK_COLUMNS), index=windows.index, dtype="float64")


def _inside(t_end_s: np.ndarray, windows: pd.DataFrame) -> list[np.ndarray]:
    """One mask per window: requests that ended in it (``[start, end)``)."""
    return [
        (t_end_s >= float(w.window_start_s)) & (t_end_s < float(w.window_end_s))
        for w in windows.itertuples(index=False)
    ]


def _pool_from_file(path: Path, windows: pd.DataFrame, pools: list[PooledItl]) -> bool:
    """Feed each window's pool from ``requests.csv`` block by block; False when the file has no
    token times or a block the typed reader refuses (the ITL columns stay NaN)."""
    from llm_locust.analysis.rundir.columnar import iter_request_frames

    if not path.is_file():
        return False
    blocks = iter_request_frames(path, _READ_COLUMNS)
    if blocks is None:
        return False
    try:
        for frame in blocks:
            if "token_times_us" not in frame.columns:
                return False
            frame = frame[succeeded(frame["error_kind"].astype(str).str.strip())]
            t_end = frame["t_start_s"].to_numpy(float) + frame["e2e_ms"].to_numpy(float) / 1000.0
            for k, inside in enumerate(_inside(t_end, windows)):
                if inside.any():
                    pools[k].add(frame[inside])
    except (pa.ArrowException, ValueError):
        return False
    return True


def multi_token_line(table: pd.DataFrame) -> str:
    """The flag for a run whose chunks carry several tokens, "" otherwise.

    >>> t = pd.DataFrame({"tokens_per_chunk_mean": [4.0, 3.9], "multi_token_chunk_share": [1.0, 1.0],
    ...                   "itl_p50_ms": [5.0, 6.0], "chunk_gap_p50_ms": [20.0, 24.0]})
    >>> multi_token_line(t)
    'Chunks carry several tokens (mean 3.9-4.0 tokens per chunk): the gap between chunks (p50 20.0-24.0 ms) is several tokens long; TPOT and per-token ITL (p50 5.0-6.0 ms) count tokens'
    """
    if "tokens_per_chunk_mean" not in table.columns:
        return ""
    means = table["tokens_per_chunk_mean"].dropna()
    if means.empty or not (means > MULTI_TOKEN_MEAN).any():
        return ""

    def span(column: str, fmt: str) -> str:
        values = table[column].dropna() if column in table.columns else pd.Series(dtype=float)
        if values.empty:
            return "-"
        low, high = fmt.format(values.min()), fmt.format(values.max())
        return low if low == high else f"{low}-{high}"

    return (
        f"Chunks carry several tokens (mean {span('tokens_per_chunk_mean', '{:.1f}')} tokens per chunk): "
        f"the gap between chunks (p50 {span('chunk_gap_p50_ms', '{:.1f}')} ms) is several tokens long; "
        f"TPOT and per-token ITL (p50 {span('itl_p50_ms', '{:.1f}')} ms) count tokens"
    )
