"""``diagnose`` reruns a ladder whose steps were too short to decide, with the dwell the verdict asks for."""

from __future__ import annotations

import math
from types import SimpleNamespace

from llm_locust.analysis.verdict.types import BottleneckKind, Evidence
from llm_locust.run.diagnose import longer_dwell_s


def result(kind: BottleneckKind, needed: float | None, holds: bool = True):
    values = {} if needed is None else {"dwell_s_needed": needed}
    short = Evidence(rule="steps_too_short", kind=BottleneckKind.UNDETERMINED, holds=holds, values=values)
    return SimpleNamespace(verdict=SimpleNamespace(bottleneck=kind, evidence=(short,)))


def test_longer_dwell_only_when_the_steps_were_too_short_and_more_is_asked():
    assert longer_dwell_s(result(BottleneckKind.UNDETERMINED, 30.0), 10.0) == 30.0
    assert longer_dwell_s(result(BottleneckKind.UNDETERMINED, 10.0), 10.0) is None  # already that long
    assert longer_dwell_s(result(BottleneckKind.UNDETERMINED, math.nan), 10.0) is None
    assert longer_dwell_s(result(BottleneckKind.UNDETERMINED, 30.0, holds=False), 10.0) is None
    assert longer_dwell_s(result(BottleneckKind.SCHEDULER_CEILING, 30.0), 10.0) is None  # decided
    assert longer_dwell_s(SimpleNamespace(verdict=None), 10.0) is None
