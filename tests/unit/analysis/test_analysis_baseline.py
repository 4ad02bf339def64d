"""Baseline medians over the first N successes (llm_locust/analysis/perstep/baseline.py)."""

import pandas as pd
import pytest

from llm_locust.analysis.perstep.baseline import baseline_medians


def frame(rows):
    columns = ["t_start_s", "ttft_ms", "e2e_ms", "output_tokens", "error_kind"]
    return pd.DataFrame(rows, columns=columns)


def test_medians_of_the_first_n_successes_by_start_time():
    requests = frame([
        (3.0, 90.0, 1090.0, 11, ""),    # 4th success: left out with n=3
        (0.0, 50.0, 1050.0, 11, ""),    # TPOT (1050-50)/10 = 100
        (1.0, 70.0, 570.0, 11, ""),     # TPOT 50
        (1.5, float("nan"), 20.0, 0, "http_5xx"),
        (2.0, 60.0, 860.0, 11, ""),     # TPOT 80
    ])  # fmt: skip
    result = baseline_medians(requests, 3)
    assert (result.requests, result.failed) == (3, 1)
    assert result.ttft_ms == 60.0
    assert result.tpot_ms == 80.0
    assert result.decode_tps == pytest.approx(1000 / 80)
    assert result.e2e_ms == 860.0
    assert "median TTFT 60 ms" in result.text
