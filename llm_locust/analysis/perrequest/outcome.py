"""Whether a run holds anything to judge: requests at all, and at least one success.

A run with no request, or with no successful one, has no critical concurrency: the report says
why instead of a verdict and ``llm-locust analyze`` returns 1 (:attr:`RunOutcome.exit_code`).
"""

from __future__ import annotations

import enum

import pandas as pd

EXAMPLE_CHARS = 160
"""Longest example error message shown (longer ones are cut, with an ellipsis)."""


class RunOutcome(enum.Enum):
    """What the requests of a run allow the analysis to conclude."""

    MEASURED = "measured"
    """At least one successful request."""
    NO_REQUESTS = "no_requests"
    """``requests.csv`` has no rows (header only, or an empty file)."""
    NO_SUCCESS = "no_success"
    """Requests were recorded, every one failed."""

    @property
    def exit_code(self) -> int:
        """0 when measured, 1 otherwise (the code of ``llm-locust analyze`` and ``run``)."""
        return 0 if self is RunOutcome.MEASURED else 1


def judge_outcome(requests: pd.DataFrame) -> RunOutcome:
    """The :class:`RunOutcome` of a run's requests.

    Parameters
    ----------
    requests : pandas.DataFrame
        ``requests.csv`` rows (:attr:`llm_locust.analysis.rundir.reader.Run.requests`); ``error_kind`` "" = success.
    """
    if requests.empty:
        return RunOutcome.NO_REQUESTS
    if not (requests["error_kind"].astype(str) == "").any():
        return RunOutcome.NO_SUCCESS
    return RunOutcome.MEASURED


def outcome_line(outcome: RunOutcome, n_requests: int, *, interrupted: int = 0) -> str:
    """One line saying why there is no verdict ("" when measured); ``interrupted`` of the
    ``n_requests`` were cut by the test's stop (no failure), and are counted apart."""
    if outcome is RunOutcome.NO_REQUESTS:
        return (
            "no requests were recorded: requests.csv has no rows (the load never started, "
            "or no worker's records reached the master); nothing to judge"
        )
    if outcome is RunOutcome.NO_SUCCESS:
        if interrupted:
            return (
                f"no successful request: cannot judge the critical concurrency ({n_requests} requests: "
                f"{n_requests - interrupted} failed, {interrupted} interrupted by the test's stop)"
            )
        return f"no successful request: cannot judge the critical concurrency (all {n_requests} requests failed)"
    return ""


def error_examples(requests: pd.DataFrame) -> pd.DataFrame:
    """Failed requests by error kind, with the first message of each kind as an example.

    Parameters
    ----------
    requests : pandas.DataFrame
        ``requests.csv`` rows; uses ``t_start_s``, ``error_kind`` ("" = success),
        ``status_code`` and ``error_message``.

    Returns
    -------
    pandas.DataFrame
        Columns ``error_kind`` (str), ``count`` (int64), ``example`` (str: the message of the
        earliest-started failure of that kind, cut to :data:`EXAMPLE_CHARS`, with its HTTP
        status when it had one); most frequent kind first, ties by name. Empty without failures.
    """
    failed = requests[requests["error_kind"].astype(str) != ""].sort_values("t_start_s", kind="stable")
    rows = []
    for kind, group in failed.groupby("error_kind", sort=True):
        first = group.iloc[0]
        message = " ".join(str(first["error_message"]).split())
        if len(message) > EXAMPLE_CHARS:
            message = message[: EXAMPLE_CHARS - 1] + "…"
        status = first["status_code"]
        if pd.notna(status) and status > 0 and str(int(status)) not in message:
            message = f"HTTP {int(status)}: {message}" if message else f"HTTP {int(status)}"
        rows.append((str(kind), len(group), message or "(no message)"))
    out = pd.DataFrame(rows, columns=["error_kind", "count", "example"])
    out = out.sort_values(["count", "error_kind"], ascending=[False, True], kind="stable")
    return out.astype({"error_kind": str, "count": "int64", "example": str}).reset_index(drop=True)


def error_lines(examples: pd.DataFrame) -> list[str]:
    """``<kind>: <count>, e.g. "<message>"`` per row of :func:`error_examples`."""
    return [
        f'{kind}: {count}, e.g. "{example}"'
        for kind, count, example in zip(examples["error_kind"], examples["count"], examples["example"])
    ]


def request_counts(requests: pd.DataFrame) -> str:
    """``"12 (ok 9, failed 2, interrupted 1: cut by the test's stop, not failures)"``: a run's
    requests by outcome; the interrupted clause only when some were.

    >>> request_counts(pd.DataFrame({"error_kind": ["", "", "http_429", "interrupted"]}))
    "4 (ok 2, failed 1, interrupted 1: cut by the test's stop, not failures)"
    >>> request_counts(pd.DataFrame({"error_kind": ["", "http_429"]}))
    '2 (ok 1, failed 1)'
    """
    kinds = requests["error_kind"].astype(str)
    ok, stopped = int((kinds == "").sum()), int((kinds == "interrupted").sum())
    failed = len(kinds) - ok - stopped
    cut = f", interrupted {stopped}: cut by the test's stop, not failures" if stopped else ""
    return f"{len(kinds)} (ok {ok}, failed {failed}{cut})"
