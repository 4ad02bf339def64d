"""Text Generation Inference's Prometheus names (``router/src/infer/v3/scheduler.rs``,
``router/src/queue.rs`` and ``router/src/server.rs``, TGI 2.x-3.x: the ``metrics`` crate's
gauges ``tgi_batch_current_size`` and ``tgi_queue_size``, histograms
``tgi_request_generated_tokens`` and ``tgi_request_input_length``).

Running is the current batch size, waiting the queue size; generated and prompt tokens per
second are the rates of the histograms' ``_sum`` (recorded when a request ends, so they arrive
in lumps). TGI exposes no KV usage. Configuration is read from ``GET /info``
(:func:`llm_locust.analysis.server.prometheus.info_config`), not from metrics.
"""

from __future__ import annotations

from llm_locust.analysis.server.families import ServerFamily
from llm_locust.analysis.server.prometheus.mapping import FamilyMapping, SampleKind, SeriesSpec

SPECS: tuple[SeriesSpec, ...] = (
    SeriesSpec(column="running", metrics=("tgi_batch_current_size",)),
    SeriesSpec(column="waiting", metrics=("tgi_queue_size",)),
    SeriesSpec(column="gen_tps", metrics=("tgi_request_generated_tokens_sum",), kind=SampleKind.COUNTER),
    SeriesSpec(column="prompt_tps", metrics=("tgi_request_input_length_sum",), kind=SampleKind.COUNTER),
)

MAPPING = FamilyMapping(family=ServerFamily.TGI, prefixes=("tgi_",), specs=SPECS)
