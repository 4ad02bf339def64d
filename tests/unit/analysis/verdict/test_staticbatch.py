"""Rule ``static_batch`` on hand-made step tables: full batches with a queue (from the series'
waiting or from the batch lines), and the cases where it must not hold."""

from __future__ import annotations

import pandas as pd

from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.verdict.recommend import recommend
from llm_locust.analysis.verdict.staticbatch import static_batch
from llm_locust.analysis.verdict.types import BottleneckKind, Evidence, Rules


def table(batch_p50, waiting, queue_mean) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "target_users": [1.0, 2.0, 4.0, 8.0, 16.0],
            "batch_size_p50": batch_p50,
            "server_waiting": waiting,
            "queue_mean": queue_mean,
        }
    )


CONFIG = ServerConfig(batch_ceiling=8, batch_ceiling_name="max_batch_size")


def test_full_batches_and_the_series_queue_name_the_first_such_step():
    # the batch lines read queue 0 at every batch start (closed loop): the series' waiting tells
    t = table([1, 2, 4, 8, 8], [0, 0, 0, 0.3, 8.0], [0, 0, 0, 0, 0])
    ev = static_batch(t, CONFIG, Rules())
    assert ev.holds and ev.values["users"] == 16 and ev.values["fill_ratio"] == 1.0
    assert ev.values["queue_mean"] == 8.0 and "max_batch_size = 8" in ev.text


def test_the_batch_lines_queue_counts_without_a_series():
    t = table([1, 2, 4, 8, 8], [float("nan")] * 5, [0, 0, 0, 3.0, 9.0])
    ev = static_batch(t, CONFIG, Rules())
    assert ev.holds and ev.values["users"] == 8 and ev.values["queue_mean"] == 3.0


def test_small_batches_or_no_queue_or_no_ceiling_do_not_hold():
    assert not static_batch(table([1, 1, 2, 3, 4], [0, 1, 2, 5, 12], [0] * 5), CONFIG, Rules()).holds
    assert not static_batch(table([1, 2, 4, 8, 8], [0] * 5, [0] * 5), CONFIG, Rules()).holds
    ev = static_batch(table([1, 2, 4, 8, 8], [0, 0, 0, 4, 8], [0] * 5), ServerConfig(), Rules())
    assert not ev.holds and "not known" in ev.text
    no_log = pd.DataFrame({"target_users": [1.0, 2.0], "server_waiting": [0.0, 3.0]})
    assert not static_batch(no_log, CONFIG, Rules()).holds


def test_it_recommends_continuous_batching_and_the_max_batch_size():
    t = table([1, 2, 4, 8, 8], [0, 0, 0, 0.3, 8.0], [0] * 5)
    ev = {
        "static_batch": static_batch(t, CONFIG, Rules()),
        "none": Evidence(rule="none", kind=BottleneckKind.NONE, holds=False),
    }
    recs = recommend(BottleneckKind.NONE, (), ev, family=None, critical_users=8.0, client_flags={})
    changes = " | ".join(r.change for r in recs if r.because == "static_batch")
    assert "continuous batching" in changes and "max batch size" in changes
