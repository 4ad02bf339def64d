"""What a round is, whether two rounds ran the same workload, and what changed between them.

A **round** is what one server configuration was measured with: a ladder run directory, a
baseline (single-request) run directory, or both. Every figure of a round comes from its run
directories' ``run.json`` and CSV files (the run-directory contract of DESIGN.md).

Sources read from ``run.json`` (schema 1, written by ``llm_locust/master/recorder.py``):
``workload`` (``protocol``, ``max_tokens``, ``ignore_eos``, ``temperature``,
``prompt_set_sha256``, ``prompts``, ``payload_file_sha256`` - the workload fingerprint - and the
client knobs ``include_usage``, ``continuous_usage``, ``tokenizer``, ``keep_alive``,
``connections``, ``timeouts_s``), ``model``, ``labels``, ``workers``; the server's configuration
is read by :mod:`llm_locust.analysis.server` (startup log, ``/props``, ``/info``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_locust.analysis.loadaxis import RATE, load_axis
from llm_locust.analysis.rundir.reader import LAZY_REQUEST_COLUMNS, Run, RunDirError, load_run

FINGERPRINT_KEYS: tuple[str, ...] = (
    "protocol",
    "max_tokens",
    "ignore_eos",
    "temperature",
    "prompt_set_sha256",
    "prompts",
    "payload_file_sha256",
    "input_tokens",
    "input_tokens_stddev",
    "shared_prefix_tokens",
    "dataset_sha256",
    "seed",
    "trace_sha256",
    "trace_speed",
)
"""``run.json`` ``workload`` keys that make two rounds comparable: the prompt set (hash and
count, so the input lengths), the output length (``max_tokens``, ``ignore_eos``), sampling
(``temperature``), the protocol and any payload file."""

CLIENT_KNOB_KEYS: tuple[str, ...] = (
    "include_usage",
    "continuous_usage",
    "tokenizer",
    "keep_alive",
    "connections",
    "timeouts_s",
)
"""``run.json`` ``workload`` keys that are client settings: a difference is a change of the
round (``client``), not a different workload."""

SERVER_CONFIG_FIELDS: tuple[str, ...] = (
    "engine",
    "version",
    "batch_ceiling",
    "token_budget",
    "chunked_prefill",
    "prefix_caching",
    "kv_capacity_tokens",
    "max_model_len",
)
""":class:`llm_locust.analysis.server.config.ServerConfig` fields compared between rounds."""

INFO_VOLATILE_KEYS: frozenset[str] = frozenset(
    {"build_info", "chat_template", "system_prompt", "media_marker", "sha", "docker_label", "uptime"}
)
"""Top-level ``/props`` / ``/info`` keys left out of the comparison (not configuration)."""


class WorkloadMismatch(ValueError):
    """Two rounds ran different workloads; the message names every differing key and value."""


class LoadAxisMismatch(ValueError):
    """Rounds whose ladders step different load axes (concurrency vs request rate): their steps,
    knees and critical values are in different units and cannot be set side by side."""


@dataclass(frozen=True, kw_only=True)
class RoundDirs:
    """The run directories of one round.

    Attributes
    ----------
    name : str
        Round name shown in the tables: the path as given.
    ladder : Run or None
        A run with ladder steps (``shape.kind`` other than ``baseline``).
    baseline : Run or None
        A run with ``shape.kind == "baseline"``.
    """

    name: str
    ladder: Run | None
    baseline: Run | None

    @property
    def runs(self) -> list[Run]:
        """The loaded runs, baseline first."""
        return [r for r in (self.baseline, self.ladder) if r is not None]


def load_round(path: Path | str) -> RoundDirs:
    """Load a round: a run directory, or a folder holding ``baseline/`` and/or ``ladder/`` ones.

    Parameters
    ----------
    path : Path or str
        A run directory (``run.json`` inside), or a round folder as ``llm-locust diagnose``
        writes it (``<round>/baseline/run.json``, ``<round>/ladder/run.json``).

    Returns
    -------
    RoundDirs

    Raises
    ------
    llm_locust.analysis.rundir.reader.RunDirError
        No run directory there, or one cannot be read (:func:`llm_locust.analysis.rundir.reader.load_run`).
    """
    path = Path(path)
    if (path / "run.json").is_file():
        run = load_run(path, unread=LAZY_REQUEST_COLUMNS)
        is_baseline = (run.meta.get("shape") or {}).get("kind") == "baseline"
        return RoundDirs(name=str(path), ladder=None if is_baseline else run, baseline=run if is_baseline else None)
    parts = {
        sub: load_run(path / sub, unread=LAZY_REQUEST_COLUMNS)
        for sub in ("baseline", "ladder")
        if (path / sub / "run.json").is_file()
    }
    if not parts:
        raise RunDirError(
            f"{path}: neither a run directory (run.json) nor a round folder (baseline/run.json, ladder/run.json)"
        )
    return RoundDirs(name=str(path), ladder=parts.get("ladder"), baseline=parts.get("baseline"))


def fingerprint(run: Run) -> dict[str, Any]:
    """The workload fingerprint of a run: :data:`FINGERPRINT_KEYS` of ``run.json`` ``workload``
    (a key the file lacks reads None)."""
    workload = run.meta.get("workload") or {}
    return {key: workload.get(key) for key in FINGERPRINT_KEYS}


def fingerprint_differences(rounds: list[RoundDirs]) -> list[str]:
    """Every fingerprint key whose value differs from the first run of the first round.

    Returns
    -------
    list of str
        ``"<key>: <round a> has X, <round b> has Y"`` lines; empty when all runs match.
    """
    runs = [(r.name, run) for r in rounds for run in r.runs]
    if not runs:
        return []
    ref_name, ref = runs[0]
    ref_fp = fingerprint(ref)
    lines = []
    for name, run in runs[1:]:
        fp = fingerprint(run)
        for key in FINGERPRINT_KEYS:
            if fp[key] != ref_fp[key]:
                lines.append(
                    f"{key}: {ref_name} ({_kind(ref)}) has {ref_fp[key]!r}, {name} ({_kind(run)}) has {fp[key]!r}"
                )
    return lines


def check_same_workload(rounds: list[RoundDirs]) -> None:
    """Raise :class:`WorkloadMismatch` naming each difference when the fingerprints differ."""
    lines = fingerprint_differences(rounds)
    if lines:
        raise WorkloadMismatch(
            "the rounds ran different workloads (use --allow-different-workload "
            "to compare anyway):\n  " + "\n  ".join(lines)
        )


def check_same_load_axis(rounds: list[RoundDirs]) -> None:
    """Raise :class:`LoadAxisMismatch` when the rounds' ladder runs are keyed by different load
    axes (:func:`llm_locust.analysis.loadaxis.load_axis` of each ladder's steps: target users, or offered
    requests/s for ``--shape rate``). A rate run's ``target_users`` is its pool of users, no load
    level: compared with a concurrency ladder it would read as the knee's users. Rounds without
    a ladder run (baseline only) are not checked. Not waived by ``allow_different_workload``."""
    axes = [(r.name, load_axis(r.ladder.steps)) for r in rounds if r.ladder is not None]
    if len({axis.quantity for _, axis in axes}) > 1:
        kinds = "; ".join(
            f"{name}: {'request-rate ladder (steps in req/s)' if axis is RATE else 'concurrency ladder (steps in users)'}"
            for name, axis in axes
        )
        raise LoadAxisMismatch(
            "the rounds' ladders step different load axes, so their steps, knees and critical values "
            f"cannot be compared ({kinds}); compare rounds of the same kind (--shape rate with --shape rate)"
        )


def _kind(run: Run) -> str:
    return (run.meta.get("shape") or {}).get("kind") or "none"


def round_settings(round_: RoundDirs, server_config) -> dict[str, Any]:
    """Everything that can differ between rounds, flattened to ``{"group.name": value}``.

    Groups: ``label`` (``run.json`` labels), ``model``, ``client`` (:data:`CLIENT_KNOB_KEYS`
    and the number of Locust workers), ``server`` (:data:`SERVER_CONFIG_FIELDS` of
    ``server_config``) and ``server_info`` (scalar top-level keys of the ``/props`` / ``/info``
    bodies, minus :data:`INFO_VOLATILE_KEYS`).

    Parameters
    ----------
    round_ : RoundDirs
    server_config : llm_locust.analysis.server.config.ServerConfig or None
        The configuration read for the round's ladder (or baseline) run.
    """
    out: dict[str, Any] = {}
    for run in round_.runs:
        meta = run.meta
        for key, value in (meta.get("labels") or {}).items():
            out[f"label.{key}"] = value
        out["model"] = meta.get("model")
        workload = meta.get("workload") or {}
        for key in CLIENT_KNOB_KEYS:
            if key in workload:
                out[f"client.{key}"] = workload[key]
        for url, body in (run.server_files.info or {}).items():
            if not isinstance(body, dict):
                continue
            endpoint = url.rstrip("/").rsplit("/", 1)[-1]
            for key, value in body.items():
                if key in INFO_VOLATILE_KEYS or isinstance(value, (dict, list)):
                    continue
                if isinstance(value, str) and len(value) > 200:
                    continue
                out[f"server_info.{endpoint}.{key}"] = value
    if round_.ladder is not None:
        out["client.workers"] = len(round_.ladder.meta.get("workers") or []) or None
    if server_config is not None:
        for name in SERVER_CONFIG_FIELDS:
            value = getattr(server_config, name)
            own = getattr(server_config, f"{name}_name", None)
            if value is not None:
                out[f"server.{name}" + (f" ({own})" if own else "")] = value
    return out


def describe_changes(base: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """``"name: a -> b"`` for every setting of :func:`round_settings` that differs.

    A setting only one side could read (e.g. the server's log was captured for one round only)
    is not a change; it is listed as ``"name: a -> (not read)"`` only when it is a label, which
    the user sets on purpose.
    """
    lines = []
    for key in sorted(set(base) | set(other)):
        a, b = base.get(key), other.get(key)
        if a == b:
            continue
        if (a is None or b is None) and not key.startswith("label."):
            continue
        lines.append(f"{key}: {_show(a)} -> {_show(b)}")
    return lines


def change_summary(lines: list[str]) -> str:
    """One cell for the round table: "none found", the change, or "more than one change: …".

    Several readings of one knob count once: lines whose ``a -> b`` values are identical (the
    server's ``batch_ceiling`` 4 -> 8 and ``/props`` ``total_slots`` 4 -> 8) are one change. A
    label the user set (``--label quant=q4_0``) declares the change: when exactly one label
    differs, the other lines are shown as what the server side also read ("also read: …"), not
    as further changes.

    Parameters
    ----------
    lines : list of str
        Output of :func:`describe_changes`.
    """
    if not lines:
        return "none found"
    labels = [line for line in lines if line.startswith("label.")]
    others = [line for line in lines if not line.startswith("label.")]
    if len(labels) == 1:
        return labels[0] + (f" (also read: {'; '.join(others)})" if others else "")
    distinct = {line.split(": ", 1)[1] for line in lines}
    if len(distinct) == 1:
        return "; ".join(lines)
    return "more than one change: " + "; ".join(lines)


def _show(value: Any) -> str:
    return "(not read)" if value is None else str(value)
