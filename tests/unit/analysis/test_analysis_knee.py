"""Critical-concurrency rule (llm_locust/analysis/verdict/knee.py), on hand-made step tables."""

import math

import numpy as np
import pandas as pd

from llm_locust.analysis.verdict.knee import find_critical_concurrency, kneed_cross_check

NAN = math.nan


def _table(users, tput, ttft, running=None, waiting=None):
    n = len(users)
    return pd.DataFrame(
        {
            "step": list(range(n)),
            "target_users": [float(u) for u in users],
            "output_tps": [float(t) for t in tput],
            "ttft_p50_ms": [float(t) for t in ttft],
            "server_running": [float(r) for r in running] if running else [NAN] * n,
            "server_waiting": [float(w) for w in waiting] if waiting else [NAN] * n,
        }
    )


def test_saturates_at_eight_with_queueing():
    # 8 vs 4: 227/216 = 1.051 per doubling < 1.15; waiting 4 > 0.5; TTFT 1227 > 1.5*150 = 225
    table = _table([1, 2, 4, 8], [55, 92, 216, 227], [50, 83, 150, 1227], running=[1, 2, 4, 4], waiting=[0, 0, 0, 4])
    result = find_critical_concurrency(table)
    assert result.users == 4.0
    assert result.saturated_step == 3 and result.saturated_users == 8.0
    assert result.server_data is True
    assert result.text == "4 (throughput stops rising at 8 users)"
    assert len(result.evidence) == 3
    assert "gain per doubling 1.051 < 1.15: yes" in result.evidence[-1]
    assert "waiting 4.00 > 0.5: yes" in result.evidence[-1]
    assert "TTFT p50 1227 ms > 1.5 x 150 ms: yes" in result.evidence[-1]
    assert "gain per doubling 1.673" in result.evidence[0]  # 92/55


def test_stricter_threshold_changes_verdict():
    table = _table([1, 2, 4, 8], [55, 92, 216, 227], [50, 83, 150, 1227], running=[1, 2, 4, 4], waiting=[0, 0, 0, 4])
    # waiting 4 is under a threshold of 5 (no queue): the full batch alone, and 1.051 >= 1.04
    assert find_critical_concurrency(table, min_gain_per_doubling=1.04, waiting_threshold=5.0).users is None


def test_still_scaling_is_not_reached():
    table = _table([1, 2, 4, 8], [50, 95, 180, 340], [50, 52, 55, 60], running=[1, 2, 4, 8], waiting=[0, 0, 0, 0])
    result = find_critical_concurrency(table)
    assert result.users is None and result.saturated_step is None
    assert result.highest_tested_users == 8.0
    assert result.text == "not reached within the tested ladder; highest tested is 8"
    assert all(line.endswith("still scaling") for line in result.evidence)


def test_full_batch_without_waiting_is_detected():
    # waiting stays 0 but running sits at its ceiling 4 and does not rise from 4 to 4
    table = _table([1, 2, 4, 8], [50, 95, 180, 190], [50, 52, 55, 400], running=[1, 2, 4, 4], waiting=[0, 0, 0, 0])
    result = find_critical_concurrency(table)
    assert result.users == 4.0
    assert "at ceiling and flat: yes" in result.evidence[-1]


def test_server_still_filling_batch_is_not_saturated():
    # throughput flat and TTFT up, but the server runs more requests and queues none: (b) fails
    table = _table([1, 2, 4, 8], [50, 95, 180, 190], [50, 52, 55, 400], running=[1, 2, 4, 8], waiting=[0, 0, 0, 0])
    assert find_critical_concurrency(table).users is None


def test_without_server_data_rests_on_client_data():
    table = _table([1, 2, 4, 8], [55, 92, 216, 227], [50, 83, 150, 1227])
    result = find_critical_concurrency(table)
    assert result.users == 4.0
    assert result.server_data is False
    assert any("client data" in line for line in result.evidence)


def test_two_steps_only():
    # 205/200 = 1.025 < 1.15; waiting 3; TTFT 400 > 150; too few points for kneed
    table = _table([4, 8], [200, 205], [100, 400], running=[4, 4], waiting=[0, 3])
    result = find_critical_concurrency(table)
    assert result.users == 4.0 and result.saturated_users == 8.0
    assert result.kneed_users is None


def test_gain_is_per_doubling_for_uneven_steps():
    # 4 -> 6 users, tput 100 -> 110: 1.1 ** (1 / log2 1.5) = 1.177 >= 1.15: still scaling;
    # tput 100 -> 108: 1.08 ** (1 / log2 1.5) = 1.141 < 1.15: saturated
    kwargs = dict(running=[4, 6], waiting=[2, 5])  # a queue, but the batch still grows: the plain threshold
    rising = find_critical_concurrency(_table([4, 6], [100, 110], [100, 400], **kwargs))
    assert rising.users is None and "gain per doubling 1.177" in rising.evidence[0]
    flat = find_critical_concurrency(_table([4, 6], [100, 108], [100, 400], **kwargs))
    assert flat.users == 4.0 and "gain per doubling 1.141" in flat.evidence[0]


def test_step_without_throughput_is_left_out():
    table = _table([1, 2, 4, 8], [55, 92, 216, NAN], [50, 83, 150, NAN], running=[1, 2, 4, 4], waiting=[0, 0, 0, 6])
    result = find_critical_concurrency(table)
    assert result.users is None
    assert result.highest_tested_users == 4.0
    assert result.evidence[0] == "step 3: no measured throughput, left out"


def test_unsorted_steps_and_single_step():
    table = _table([8, 1, 4, 2], [227, 55, 216, 92], [1227, 50, 150, 83], running=[4, 1, 4, 2], waiting=[4, 0, 0, 0])
    assert find_critical_concurrency(table).users == 4.0
    single = find_critical_concurrency(_table([1], [40], [50]))
    assert single.users is None and single.highest_tested_users == 1.0
    assert single.text.endswith("highest tested is 1")
    empty = find_critical_concurrency(_table([1, 2], [NAN, NAN], [NAN, NAN]))
    assert empty.users is None and empty.highest_tested_users is None
    assert empty.text == "not reached (no step with measured throughput)"


def test_kneed_cross_check():
    users = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    assert kneed_cross_check(users, np.array([47.0, 81.0, 141.0, 141.0, 124.0])) == 4.0
    assert kneed_cross_check(users[:2], np.array([47.0, 81.0])) is None


def test_queue_at_a_full_batch_allows_a_small_gain_from_filled_gaps():
    # measured on a real vLLM (max_num_seqs 4) under CPU contention: 198/169 = 1.172 per doubling,
    # above 1.15 but below 1.3, while waiting 3.90 > 0.5 and running 3.54 is at its max and flat
    table = _table(
        [1, 2, 4, 8], [47, 80, 169, 198], [60, 85, 141, 1405], running=[0.95, 1.9, 3.47, 3.54], waiting=[0, 0, 0, 3.9]
    )
    result = find_critical_concurrency(table)
    assert result.users == 4.0
    assert (
        "(but a queue at the highest batch, which grew only x1.020 per doubling: the gain is per-sequence speed, not concurrency: yes)"
        in result.evidence[-1]
    )


def test_a_large_gain_at_a_full_batch_with_a_queue_is_per_sequence_speed():
    # measured on llama.cpp (4 slots) while other jobs loaded the machine: from 4 to 8 users the
    # output throughput rose x1.426 (283.2 -> 403.9 tokens/s) while running went 3.89 -> 4.00 with 4
    # waiting and TTFT p50 393 -> 3619 ms: more users could not run more sequences
    table = _table(
        [1, 2, 4, 8], [100, 145.1, 283.2, 403.9], [60, 160, 393, 3619], running=[1, 2, 3.89, 4], waiting=[0, 0, 0, 4]
    )
    result = find_critical_concurrency(table)
    assert result.users == 4.0 and result.saturated_users == 8.0
    assert (
        "gain per doubling 1.426 < 1.15: no (but a queue at the highest batch, which grew only x1.028"
        in result.evidence[-1]
    )
    # the same gain with the batch still growing (running 4 -> 6) is still scaling
    growing = _table(
        [1, 2, 4, 8], [100, 145.1, 283.2, 403.9], [60, 160, 393, 3619], running=[1, 2, 3.89, 6], waiting=[0, 0, 0, 4]
    )
    assert find_critical_concurrency(growing).users is None


def test_a_small_gain_with_a_queue_but_running_still_rising_is_still_scaling():
    # 8 vs 4: gain 1.2 < 1.3 with waiting 2, but running rose 3 -> 6 (batch not full): not saturated
    table = _table([1, 2, 4, 8], [50, 95, 180, 216], [50, 60, 80, 400], running=[1, 2, 3, 6], waiting=[0, 0, 0, 2])
    assert find_critical_concurrency(table).users is None


def test_all_zero_running_is_not_a_full_batch():
    table = _table([1, 2], [0.001, 0.001], [NAN, NAN], running=[0, 0], waiting=[0, 0])
    result = find_critical_concurrency(table)
    assert "at ceiling and flat: no" in result.evidence[-1]


def test_a_queue_longer_than_the_batch_at_its_highest_saturates_the_step():
    # measured in a request-rate ladder against 4 slots (5 s steps): from 4 to 8 req/s running
    # went 3.19 -> 4.00 (the batch still filled its last slot: not "flat"), 10.78 waited and TTFT
    # p50 went 197 -> 1730 ms while throughput gained x1.212 per doubling
    table = _table(
        [1, 2, 4, 8], [50, 98, 190, 230.3], [60, 70, 197, 1730], running=[1, 1.9, 3.19, 4], waiting=[0, 0, 0.3, 10.78]
    )
    result = find_critical_concurrency(table)
    assert result.users == 4.0
    assert "gain per doubling 1.212 < 1.15: no (but a queue longer than the batch" in result.evidence[-1]
    # a queue shorter than the batch that still grows (running 3 -> 6 of 6, 2 waiting) is not enough
    growing = _table([1, 2, 4, 8], [50, 95, 180, 216], [50, 60, 80, 400], running=[1, 2, 3, 6], waiting=[0, 0, 0, 2])
    assert find_critical_concurrency(growing).users is None


def test_a_queue_at_the_ceiling_reached_at_that_step_saturates_it():
    # measured on vLLM's CPU build at max_num_seqs 2 (CI, stop 17): from 2 to 4 users the output
    # throughput rose x1.365 while running went 1.78 -> 2.00 (the queue filled the gaps between one
    # user's requests) with 2 waiting and TTFT p50 122 -> 2255 ms: the batch grew x1.12 < 1.15, so
    # requests start to queue at 4 users and the critical concurrency is 2 (= max_num_seqs)
    tput = [30.0, 30.0 * 2.195, 30.0 * 2.195 * 1.365, 30.0 * 2.195 * 1.365 * 0.892]
    table = _table([1, 2, 4, 8], tput, [71, 122, 2255, 4511], running=[1.0, 1.78, 2.0, 2.0], waiting=[0, 0, 2, 6])
    result = find_critical_concurrency(table)
    assert (result.users, result.saturated_users) == (2.0, 4.0)
    assert f"which grew only x{2.0 / 1.78:.3f} per doubling" in result.evidence[-1]
