"""The pooled ITL in bulk (llm_locust/analysis/perrequest/itlpool.py) against numpy on the raw values.

Each request's values and weights come from :func:`llm_locust.analysis.perrequest.itl.request_itl` (the definition,
checked by hand elsewhere); the pooled quantiles from numpy on those raw values (weights expanded,
``inverted_cdf``), the inter-chunk gaps from numpy on gaps parsed here with Python.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import llm_locust.analysis.rundir.csvread
from llm_locust.analysis.perrequest.itl import request_itl
from llm_locust.analysis.perrequest.itlpool import itl_from_csv, itl_summary, linear_percentile, split_numbers
from llm_locust.analysis.rundir.reader import read_requests
from llm_locust.client.record import CSV_COLUMNS, RequestRecord
from llm_locust.master.runwriter import CsvAppender


def _requests(seed: int, n: int, *, whole_counts: bool) -> pd.DataFrame:
    """Random requests: token times in whole us, some with their per-event counts (whole numbers),
    some without (then the spread (N-1)/(m-1) is a dyadic fraction so sums stay exact), failures,
    one-event, one-token and unfinished rows, gaps above a second."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        m = int(rng.integers(0, 12))
        gaps = rng.integers(1, 60_000, m) * (rng.random(m) < 0.97) + rng.integers(1_000_000, 3_000_000, m) * (
            rng.random(m) < 0.03
        )
        times = np.cumsum(gaps) + int(rng.integers(5_000, 200_000))
        own = whole_counts and rng.random() < 0.7
        counts = rng.integers(0 if rng.random() < 0.2 else 1, 4, m) if own else None
        if own:
            tokens = int(counts.sum())
        elif m > 1 and (m - 1) % 2 == 0 and rng.random() < 0.5:
            tokens = 1 + (m - 1) * 3 // 2  # 1.5 tokens per later event
        else:
            tokens = m if rng.random() < 0.95 else 1
        e2e = (times[-1] if m else 0) / 1000.0 + float(rng.integers(0, 5_000)) / 1000.0
        kind = "http_5xx" if rng.random() < 0.1 else ""
        rows.append({
            "error_kind": kind,
            "ttft_ms": times[0] / 1000.0 if m else math.nan,
            "e2e_ms": math.nan if rng.random() < 0.03 else e2e,
            "output_tokens": float(tokens),
            "token_times_us": (" " if rng.random() < 0.1 else "") + " ".join(map(str, times)),
            "event_tokens": " ".join(map(str, counts)) if own else "",
        })  # fmt: skip
    return pd.DataFrame(rows)


def _raw(requests: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ok = requests[requests["error_kind"] == ""]
    values, weights, gaps = [np.zeros(0)], [np.zeros(0)], [np.zeros(0)]
    for row in ok.itertuples(index=False):
        v, w = request_itl(row.ttft_ms, row.e2e_ms, row.output_tokens, row.token_times_us, row.event_tokens)
        values.append(v)
        weights.append(w)
        gaps.append(np.diff([float(t) for t in row.token_times_us.split()]) / 1000.0)
    return np.concatenate(values), np.concatenate(weights), np.concatenate(gaps)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("whole_counts", [True, False])
def test_pooled_figures_equal_numpy_on_the_raw_values(seed, whole_counts):
    requests = _requests(seed, 400, whole_counts=whole_counts)
    values, weights, gaps = _raw(requests)

    result = itl_summary(requests)

    for q in (0.50, 0.95, 0.99):
        expected = np.quantile(values, q, weights=weights, method="inverted_cdf")
        assert result[f"itl_p{round(q * 100)}_ms"] == expected, q
    assert result["itl_mean_ms"] == pytest.approx(float((values * weights).sum() / weights.sum()), rel=1e-12)
    assert result["chunk_gap_p50_ms"] == np.percentile(gaps, 50)
    assert result["chunk_gap_p99_ms"] == np.percentile(gaps, 99)
    assert result["chunk_gap_max_ms"] == gaps.max()


def test_blocks_of_any_size_give_the_same_figures():
    requests = _requests(7, 300, whole_counts=True)
    whole = itl_summary(requests)
    from llm_locust.analysis.perrequest.itlpool import PooledItl

    pool = PooledItl()
    for start in range(0, len(requests), 7):
        pool.add(requests.iloc[start : start + 7])
    pooled = pool.summary()
    assert {k: v for k, v in pooled.items() if k != "itl_mean_ms"} == {
        k: v for k, v in whole.items() if k != "itl_mean_ms"
    }
    assert pooled["itl_mean_ms"] == pytest.approx(whole["itl_mean_ms"], rel=1e-12)


def test_times_with_fractions_and_a_bad_cell():
    requests = pd.DataFrame({
        "error_kind": ["", ""], "ttft_ms": [10.0, 20.0], "e2e_ms": [40.0, 60.0], "output_tokens": [3.0, 3.0],
        "token_times_us": ["10000.5 25000 39000.25", "20000 35000 50000"], "event_tokens": ["", ""],
    })  # fmt: skip
    values, weights, gaps = _raw(requests)
    result = itl_summary(requests)
    assert result["itl_p50_ms"] == np.quantile(values, 0.5, weights=weights, method="inverted_cdf")
    assert result["chunk_gap_p99_ms"] == np.percentile(gaps, 99)
    with pytest.raises(ValueError):  # a cell that is no number is refused, as row by row
        itl_summary(requests.assign(token_times_us=["10000 x", "20000"]))


def test_nothing_applies_gives_nan():
    result = itl_summary(pd.DataFrame({"error_kind": ["http_5xx"], "ttft_ms": [1.0], "e2e_ms": [2.0],
                                       "output_tokens": [5.0], "token_times_us": ["1 2"], "event_tokens": [""]}))  # fmt: skip
    assert all(math.isnan(v) for v in result.values())


@pytest.mark.parametrize("n", [1, 2, 3, 10, 101, 1000])
def test_linear_percentile_of_a_histogram_is_numpys_on_the_raw_values(n):
    rng = np.random.default_rng(n)
    raw = rng.integers(0, max(2, n // 3), n) / 7.0  # many ties
    values, counts = np.unique(raw, return_counts=True)
    for percent in (0, 1, 25, 50, 95, 99, 99.9, 100):
        assert linear_percentile(values, counts, percent) == np.percentile(raw, percent), percent


def test_split_numbers_as_python_splits_them():
    cells = pd.Series(["29431 52835  74454", "", "  7 ", "1e3 2", "5"], dtype=str)
    values, counts, whole = split_numbers(cells)
    expected = [float(t) for cell in cells for t in cell.split()]
    assert values.tolist() == expected and counts.tolist() == [len(c.split()) for c in cells] and not whole
    assert split_numbers(pd.Series(["1 2", "3"], dtype=str))[2] is True
    assert split_numbers(pd.Series(["1 nan"], dtype=str)) is None and split_numbers(pd.Series(["x"])) is None


def test_itl_from_csv_reads_the_file_in_blocks(tmp_path, monkeypatch):
    requests = _requests(11, 500, whole_counts=True)
    path = tmp_path / "requests.csv"
    writer = CsvAppender(path, CSV_COLUMNS)
    for i, row in enumerate(requests.itertuples(index=False)):
        record = RequestRecord(request_id=f"w-{i}", worker_id="w", name="chat", t_start_s=1000.0 + i,
                               ttft_ms=row.ttft_ms, e2e_ms=row.e2e_ms, output_tokens=row.output_tokens,
                               error_kind=row.error_kind, token_times_us=row.token_times_us,
                               event_tokens=row.event_tokens)  # fmt: skip
        writer.write_rows([record.to_row()])
    writer.close()
    monkeypatch.setattr(llm_locust.analysis.rundir.csvread, "_FRAME_BYTES", 4096)  # many blocks

    result = itl_from_csv(path)

    expected = itl_summary(read_requests(path))
    assert result.pop("itl_mean_ms") == pytest.approx(expected.pop("itl_mean_ms"), rel=1e-12)
    assert result == expected


@pytest.mark.parametrize("seed", range(3))
def test_plain_rows_alone_and_mixed_give_numpys_figures(seed):
    """Rows of one token per event (N = events, or every stated count 1) take the fast path:
    alone in a block, and mixed with other rows."""
    requests = _requests(seed, 400, whole_counts=True)
    events = requests["token_times_us"].str.split().str.len()
    ones = requests["event_tokens"].map(lambda cell: cell == "" or set(cell.split()) == {"1"})
    plain = requests[(events >= 2) & (requests["output_tokens"] == events) & requests["e2e_ms"].notna() & ones]
    assert len(plain) > 50 and (plain["event_tokens"] != "").any()
    for block in (plain, pd.concat([plain, requests.iloc[:40]])):
        values, weights, gaps = _raw(block)
        result = itl_summary(block)
        for q in (0.50, 0.95, 0.99):
            assert result[f"itl_p{round(q * 100)}_ms"] == np.quantile(values, q, weights=weights, method="inverted_cdf")
        assert result["itl_mean_ms"] == pytest.approx(float((values * weights).sum() / weights.sum()), rel=1e-12)
        assert (result["chunk_gap_p50_ms"], result["chunk_gap_p99_ms"]) == tuple(np.percentile(gaps, [50, 99]))
        assert result["chunk_gap_max_ms"] == gaps.max()


def test_split_numbers_of_python_strings_and_missing_cells():
    cells = ["29431 52835 74454", "", None, " 7\t8 ", "5"]
    values, counts, whole = split_numbers(cells)
    assert values.tolist() == [29431, 52835, 74454, 7, 8, 5] and counts.tolist() == [3, 0, 0, 2, 1] and whole
    assert split_numbers(["1 -1 2"])[0].tolist() == [1, -1, 2]  # the writer's row mark in a cell: still read
    assert split_numbers(["1 -5"])[0].tolist() == [1, -5]
    huge = split_numbers(["1 99999999999999999999"])
    assert huge is not None and not huge[2] and huge[0].tolist() == [1.0, 1e20]  # not clipped to int64
    assert split_numbers(["1 x"]) is None and split_numbers([1.5]) is None
