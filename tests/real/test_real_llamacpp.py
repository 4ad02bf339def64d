"""Server-side truth against a real llama.cpp ``llama-server`` (``SLOTS=4``, random-weight 111M
model, one thread; from ``../shared/real-servers/llama-cpp``).

Expected behaviour comes from the server's configuration, not from this project's code: with 4
slots, ``llamacpp:requests_processing`` reads min(c, 4) and ``llamacpp:requests_deferred`` leaves
zero only at c = 8; output throughput rises from 1 to 4 and stops rising from 4 to 8 (an
independent client measured 41, 57, 107 and 107 output tokens/s and TTFT p50 of 25, 48, 58 and
2433 ms at 1, 2, 4 and 8: ``shared/fixtures/llama-cpp-b1-0c1e570/README.md``). The slot count is
read back from ``GET /props`` and from the startup log captured with ``--server-log``. The run is
the f32 round of the quantization A/B (``conftest.llamacpp_quant_ab``): one ladder serves both.
"""

from __future__ import annotations

import csv
import json

import pytest

from llm_locust.analysis.pipeline import analyze_run
from llm_locust.analysis.server.sources import ServerOptions, ServerSource
from tests.verdict_contract import assert_verdict_contract

pytestmark = [pytest.mark.slow, pytest.mark.real_server]

LADDER = [1, 2, 4, 8]
SLOTS = 4  # conftest.llamacpp_quant_ab's server setting


@pytest.fixture(scope="module")
def llamacpp_ladder_run(llamacpp_quant_ab):
    """The ladder run directory of the f32 round (two Locust workers, the server's log followed)."""
    return llamacpp_quant_ab.round_a / "ladder"


def test_critical_concurrency_from_requests_processing_and_deferred(llamacpp_ladder_run):
    result = analyze_run(llamacpp_ladder_run, server=ServerOptions(source=ServerSource.METRICS))
    table = result.table.set_index("target_users")

    assert result.critical.users == SLOTS, "\n".join(result.critical.evidence)
    assert "llamacpp mapping" in result.critical.evidence[0]
    assert set(table["server_source"]) == {"metrics"}
    for c in LADDER:
        assert table.loc[c, "server_running"] == pytest.approx(min(c, SLOTS), rel=0.2), table
        if c <= SLOTS:
            assert table.loc[c, "server_waiting"] < 0.5, table
    assert table.loc[8, "server_waiting"] > 2.0, table
    # tokens generated in each window (the prorated figure the verdict judges on): the headline
    # count of completed requests moves by whole waves of 64-token answers in a 12 s window
    tput = table["output_tps_prorated"]
    assert tput[4] / tput[1] >= 1.5, tput
    assert tput[8] / tput[4] < 1.3, tput  # flat by the knee's rule where requests queue at a full batch


def test_configured_ceiling_is_four_slots(llamacpp_ladder_run):
    result = analyze_run(llamacpp_ladder_run, write=False)
    config = result.evidence.config

    assert config.engine == "llamacpp"
    assert (config.batch_ceiling, config.batch_ceiling_name) == (SLOTS, "n_slots")
    assert "server.log" in config.sources["batch_ceiling"]  # the startup log comes first
    props = [url for url in result.run.server_files.info if url.endswith("/props")]
    assert result.run.server_files.info[props[0]]["total_slots"] == SLOTS
    assert result.config_check.took_effect is True, result.config_check.line
    # the verdict: requests queue behind the 4 busy slots
    assert result.verdict.bottleneck.value == "scheduler_ceiling", result.verdict.line
    assert result.verdict.critical_concurrency == SLOTS
    assert result.verdict.table["valid"].all(), result.verdict.table["invalid_reason"].tolist()
    assert_verdict_contract(json.loads((llamacpp_ladder_run / "report" / "verdict.json").read_text()))
    assert any(r.flag.startswith("--parallel") for r in result.verdict.recommendations)


def test_slot_lines_of_the_log_agree_with_the_metrics(llamacpp_ladder_run):
    by_log = analyze_run(
        llamacpp_ladder_run, write=False, server=ServerOptions(source=ServerSource.LOG)
    ).table.set_index("target_users")
    for c in LADDER:
        assert by_log.loc[c, "server_running"] == pytest.approx(min(c, SLOTS), rel=0.2), by_log
    assert by_log["server_waiting"].isna().all()  # not in llama.cpp's log: no data, never zero


def test_every_request_recorded_and_successful(llamacpp_ladder_run):
    with open(llamacpp_ladder_run / "requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    failed = [(r["error_kind"], r["error_message"][:80]) for r in rows if r["error_kind"]]
    assert not failed, failed
    assert all(int(r["output_tokens"]) == 64 for r in rows)
