"""The batch ceiling a compare reads for each round (llm_locust.analysis.compare.moved.ceiling_change).

The failing input comes from a CI-like run of tests/e2e/test_diagnose_ab.py: round B, the embedded
server with --max-num-seqs 8 driven up to 4 users, had one scrape with a request waiting between
two scheduler iterations (waiting max 1, per-step average about 0); its ceiling was read as the
observed running max, 4, instead of the startup config's 8. Expected ceilings here are the
servers' settings.
"""

from __future__ import annotations

from llm_locust.analysis.compare.moved import ceiling_change
from tests.unit.analysis.compare.summary_factory import summary

ROUND = dict(
    decode=[45.0] * 8,
    ttft=[40.0] * 8,
    steps={1: (45.0, 44.0, 46.0), 2: (90.0, 88.0, 92.0), 4: (170.0, 166.0, 174.0)},
    ttft_p50={1: 40.0, 2: 42.0, 4: 48.0},
)


def test_a_waiting_blip_under_the_configured_ceiling_is_no_observed_ceiling():
    a = summary("a", **ROUND, critical=2.0, running_max=2.0, waiting_max=2.0, waiting_mean=1.9, ceiling=2)
    b = summary("b", **ROUND, critical=None, running_max=4.0, waiting_max=1.0, waiting_mean=0.02, ceiling=8)

    change = ceiling_change(a, b)

    assert (change.base, change.other, change.moved) == (2.0, 8.0, True)
    assert change.source_other == "startup config (n_slots)"
    assert change.source_base == "observed running max with requests waiting"


def test_a_persistent_queue_below_the_configured_ceiling_is_the_ceiling_applied():
    # a KV-limited round: running held at 3 under a configured 8 while 2 requests waited on average
    a = summary("a", **ROUND, critical=2.0, running_max=2.0, waiting_max=2.0, waiting_mean=1.9, ceiling=2)
    b = summary("b", **ROUND, critical=2.0, running_max=3.0, waiting_max=4.0, waiting_mean=2.0, ceiling=8)

    assert (ceiling_change(a, b).other, ceiling_change(a, b).source_other) == (
        3.0, "observed running max with requests waiting",
    )  # fmt: skip
