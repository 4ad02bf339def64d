"""The request source of one process, and the workload keys of ``run.json``, from the options."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from llm_locust.client.workload.counting import CHAT_PROTOCOL, Counter, ServerCounter, local_counter
from llm_locust.client.workload.source import CyclingPrompts, RequestSource
from llm_locust.client.workload.synthetic import LEAD, Calibration, SyntheticPrompts, calibrate

logger = logging.getLogger(__name__)


def synthetic_counter(options, *, host: str, model: str) -> tuple[Counter, str]:
    """The counter ``--input-tokens`` calibrates with, and its method name.

    ``--tokenizer``: local (plus one server probe for a chat template that is not next to it);
    else the server's ``usage.prompt_tokens``.

    Raises
    ------
    ValueError
        No tokenizer and a protocol that reports no prompt tokens (TGI).
    """
    api_key = getattr(options, "api_key", "") or ""

    def server() -> ServerCounter:
        return ServerCounter(host=host, protocol=options.protocol, model=model, api_key=api_key)

    if getattr(options, "tokenizer", ""):
        counter = local_counter(options.tokenizer, protocol=options.protocol, server=server, probe_content=LEAD)
        chat_offset = options.protocol == CHAT_PROTOCOL and not getattr(counter, "has_template", True)
        return counter, "tokenizer+server" if chat_offset else "tokenizer"
    return server(), "server"


def input_calibration(options, *, host: str, model: str) -> Calibration:
    """The calibration of ``--input-tokens`` prompts: ``--input-calibration`` when given (measured
    by ``llm-locust run`` before the run), else measured now (:func:`synthetic_counter`).

    Raises
    ------
    ValueError, RuntimeError, requests.RequestException
        As :func:`synthetic_counter` and :func:`~llm_locust.client.workload.synthetic.calibrate`.
    """
    given = getattr(options, "input_calibration", "") or ""
    if given:
        return Calibration.from_json(given)
    counter, method = synthetic_counter(options, host=host, model=model)
    calibration = calibrate(counter, method=method)
    logger.info(
        "prompts sized by %s: %d tokens of template and start, %d one-token words (%d probes)",
        method, calibration.base_tokens, len(calibration.words), getattr(counter, "probes", 0),
    )  # fmt: skip
    return calibration


def build_request_source(
    options, *, host: str, model: str, prompts: tuple[str, ...], stream: str = "0", start: int = 0
) -> RequestSource:
    """The :class:`~llm_locust.client.workload.source.RequestSource` the options ask for.

    Parameters
    ----------
    options : argparse.Namespace
        Locust's parsed options (llm-locust's registered).
    host, model : str
        Target and model (for calibration probes).
    prompts : tuple of str
        The prompt set (used without ``--input-tokens`` and ``--dataset``).
    stream : str, default "0"
        This process's name among the load generators (the worker index): its own random words,
        lengths and dataset start.
    start : int, default 0
        First prompt of the prompt set.

    Raises
    ------
    ValueError, OSError, RuntimeError
        A dataset that cannot be used, a length below the template's, a counter that cannot
        count (:class:`~llm_locust.client.workload.counting.CountError`,
        :class:`~llm_locust.client.workload.synthetic.CalibrationError`).
    """
    seed = getattr(options, "seed", 0) or 0
    if getattr(options, "trace", ""):
        from llm_locust.client.workload.traceprompts import TracePrompts

        return TracePrompts(input_calibration(options, host=host, model=model), seed=seed, stream=stream)
    if getattr(options, "input_tokens", 0):
        calibration = input_calibration(options, host=host, model=model)
        return SyntheticPrompts(
            calibration, input_tokens=options.input_tokens, stddev_tokens=options.input_tokens_stddev,
            shared_prefix_tokens=options.shared_prefix_tokens, seed=seed, stream=stream, max_tokens=options.max_tokens,
        )  # fmt: skip
    if getattr(options, "dataset", ""):
        from llm_locust.client.workload.dataset import DatasetPrompts, load_dataset

        count_output = None
        if getattr(options, "tokenizer", ""):
            from llm_locust.client.tokens import TokenizerCounter

            count_output = TokenizerCounter(options.tokenizer)
        dataset = load_dataset(options.dataset, count_output=count_output)
        return DatasetPrompts(dataset, max_tokens=options.max_tokens, seed=seed, stream=stream)
    return CyclingPrompts(prompts, max_tokens=options.max_tokens, start=start)


def workload_meta(options) -> dict:
    """``run.json`` ``workload`` keys of the input options (part of the workload fingerprint).

    ``input_tokens``, ``input_tokens_stddev``, ``shared_prefix_tokens`` (None without
    ``--input-tokens``), ``dataset_sha256`` (hex SHA-256 of the file, None without one),
    ``dataset`` (its file name), ``seed``, ``trace``, ``trace_sha256``, ``trace_format`` and
    ``trace_speed`` (None without ``--trace``), ``session_turns`` and ``think_time_s`` (None without
    ``--session-turns``) and ``input_calibration`` (what sized the prompts:
    ``base_tokens``, ``words``, ``method``; set by ``llm-locust run``).
    """
    input_tokens = getattr(options, "input_tokens", 0) or 0
    dataset = getattr(options, "dataset", "") or ""
    trace = getattr(options, "trace", "") or ""
    return {
        "input_tokens": input_tokens or None,
        "input_tokens_stddev": options.input_tokens_stddev if input_tokens else None,
        "shared_prefix_tokens": options.shared_prefix_tokens if input_tokens else None,
        "dataset_sha256": hashlib.sha256(Path(dataset).read_bytes()).hexdigest() if dataset else None,
        "dataset": Path(dataset).name if dataset else None,
        "seed": getattr(options, "seed", 0) if (input_tokens or dataset or trace) else None,
        "trace": Path(trace).name if trace else None,
        "trace_sha256": hashlib.sha256(Path(trace).read_bytes()).hexdigest() if trace else None,
        "trace_format": getattr(options, "trace_format", "jsonl") if trace else None,
        "trace_speed": getattr(options, "trace_speed", 1.0) if trace else None,
        "session_turns": getattr(options, "session_turns", 0) or None,
        "think_time_s": getattr(options, "think_time_s", 0.0) if getattr(options, "session_turns", 0) else None,
        "input_calibration": json.loads(options.input_calibration)
        if getattr(options, "input_calibration", "")
        else None,
    }
