"""Triton with the TensorRT-LLM backend: Prometheus names (``tensorrtllm_backend`` README,
"Triton Metrics": ``nv_trt_llm_request_metrics{request_type=...}``,
``nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=...}``; Triton core's
``nv_inference_pending_request_count``; Triton 23.11 and later).

Running is ``request_type="active"`` (else ``"scheduled"``), waiting ``request_type="waiting"``
(else Triton's pending request count), KV usage ``kv_cache_block_type="fraction"``. The batch
ceiling is ``request_type="max"``.
"""

from __future__ import annotations

import pandas as pd

from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.server.families import ServerFamily
from llm_locust.analysis.server.prometheus.mapping import (
    Combine,
    FamilyMapping,
    SeriesSpec,
    latest_value,
)

REQUESTS = "nv_trt_llm_request_metrics"
SPECS: tuple[SeriesSpec, ...] = (
    SeriesSpec(column="running", metrics=(REQUESTS,), labels=(("request_type", "active"),)),
    SeriesSpec(column="waiting", metrics=(REQUESTS,), labels=(("request_type", "waiting"),)),
    SeriesSpec(
        column="kv_usage_ratio",
        metrics=("nv_trt_llm_kv_cache_block_metrics",),
        labels=(("kv_cache_block_type", "fraction"),),
        combine=Combine.MEAN,
    ),
    # fallbacks, used when the preferred sample is absent
    SeriesSpec(column="running", metrics=(REQUESTS,), labels=(("request_type", "scheduled"),)),
    SeriesSpec(column="waiting", metrics=("nv_inference_pending_request_count",)),
)


def config(samples: pd.DataFrame) -> ServerConfig:
    """Batch ceiling from ``nv_trt_llm_request_metrics{request_type="max"}``."""
    value = latest_value(samples, REQUESTS, (("request_type", "max"),))
    return ServerConfig(engine=ServerFamily.TRITON.value).with_value(
        "batch_ceiling",
        None if value is None else int(value),
        f'/metrics {REQUESTS}{{request_type="max"}}',
        batch_ceiling_name="max active requests",
    )


MAPPING = FamilyMapping(
    family=ServerFamily.TRITON, prefixes=("nv_trt_llm_", "nv_inference_"), specs=SPECS, config=config
)
