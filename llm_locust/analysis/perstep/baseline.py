"""The single-request baseline (seed step 1): medians of N requests sent one at a time."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from llm_locust.analysis.perrequest.metrics import with_request_metrics


@dataclass(frozen=True, kw_only=True)
class Baseline:
    """Medians over the first ``requests`` successful requests of a baseline run.

    Attributes
    ----------
    requests : int
        Successful requests the medians are taken over (at most the N asked for).
    failed : int
        Failed requests among those started before the last one counted.
    ttft_ms, tpot_ms, e2e_ms : float
        Medians, ms (NaN when no request applies).
    decode_tps : float
        Median decode rate, tokens/s per request (1000 / TPOT).
    output_tokens : float
        Median output tokens.
    """

    requests: int
    failed: int
    ttft_ms: float
    tpot_ms: float
    e2e_ms: float
    decode_tps: float
    output_tokens: float

    @property
    def text(self) -> str:
        """One line: ``Baseline (N requests, one at a time): median TTFT … ms, …``."""
        return (
            f"Baseline ({self.requests} requests, one at a time; {self.failed} failed): median TTFT "
            f"{self.ttft_ms:.0f} ms, TPOT {self.tpot_ms:.1f} ms, decode rate {self.decode_tps:.1f} tokens/s, "
            f"E2E {self.e2e_ms:.0f} ms, {self.output_tokens:.0f} output tokens"
        )


def baseline_medians(requests: pd.DataFrame, n: int | None = None) -> Baseline:
    """Medians of the first ``n`` successful requests by start time.

    A distributed run may finish a few more than asked for (workers report every few seconds);
    only the first ``n`` count. Failures are counted, never part of a median.

    Parameters
    ----------
    requests : pandas.DataFrame
        The run's requests (:class:`llm_locust.analysis.rundir.reader.Run` ``requests``).
    n : int, optional
        Requests asked for (run.json ``shape.requests``); all successes when None.

    Returns
    -------
    Baseline
    """
    ordered = with_request_metrics(requests).sort_values("t_start_s", kind="stable")
    ok = ordered[ordered["error_kind"] == ""]
    if n is not None:
        ok = ok.head(n)
    last_start = ok["t_start_s"].max() if len(ok) else float("inf")
    failed = int(((ordered["error_kind"] != "") & (ordered["t_start_s"] <= last_start)).sum())
    return Baseline(
        requests=len(ok),
        failed=failed,
        ttft_ms=float(ok["ttft_ms"].median()),
        tpot_ms=float(ok["tpot_ms"].median()),
        e2e_ms=float(ok["e2e_ms"].median()),
        decode_tps=float(ok["decode_tps"].median()),
        output_tokens=float(ok["output_tokens"].median()),
    )
