"""A pure, clock-free model of a continuous-batching scheduler (vLLM V1 style).

The engine is stepped by hand: :meth:`BatchEngine.begin_step` admits requests and says how long
the step takes, :meth:`BatchEngine.end_step` hands every sequence of the batch one token. The
asyncio driver (``driver.py``) sleeps the step time in between; tests call :meth:`BatchEngine.step`.

Model of one step
-----------------
1. Preemption: the running sequences each need one more KV token this step. While the KV held
   plus that growth exceeds ``kv_capacity_tokens``, the most recently admitted running request
   is preempted (vLLM V1 recompute mode): its KV is freed and it goes back to the head of the
   waiting queue, keeping the tokens it already produced.
2. Admission (skipped in a step that preempted, as vLLM V1 does): from the head of the FCFS
   waiting queue, while ``running < max_num_seqs``, the request's context (prompt plus tokens
   already produced, i.e. a recompute after preemption) fits in the step's token budget
   (``max_num_batched_tokens`` minus one token per running sequence) and context + 1 fits in the
   free KV. No chunked prefill: a context larger than the whole budget is admitted only into an
   otherwise empty step. The queue is never reordered to skip a blocked head.
3. Duration, ms: ``slowdown * (decode_base_ms + decode_per_seq_ms * B + prefill_ms_per_token * P)``
   with B the sequences in the batch after admission and P the context tokens prefilled (with
   prefix caching, those found cached left out); with
   ``roofline`` the decode part is ``max(decode_base_ms, decode_per_seq_ms * B)`` instead: a
   decode step reads all the weights whatever the batch (memory-bound, flat) until the batch's
   arithmetic makes it compute-bound (growing with B) - the roofline model of decode on a GPU,
   where output throughput rises linearly up to ``decode_base_ms / decode_per_seq_ms``
   sequences and is flat beyond.
4. End of step: each of the B sequences gets one token (admitted ones get their first token);
   a sequence finishes when it reaches ``stop_after_tokens``: ``length`` if that equals
   ``max_tokens``, else ``stop`` (an early EOS).

KV held by a running request = prompt + generated tokens; usage = held / capacity.

Variants (each a model of a real server behaviour)
--------------------------------------------------
- ``effective_max_num_seqs`` > 0: the ceiling the scheduler really applies, while the startup log
  and metrics still announce ``max_num_seqs`` - a setting that did not take effect (a wrapper that
  drops the flag, a server that serialises requests behind a lock). With 1, batching is off.
- ``batching="static"``: a batch is formed only when no sequence runs, and then runs to
  completion (no admission while any sequence of it is still decoding), as llama.cpp's server
  does with ``--no-cont-batching`` (``update_slots``: prompts are batched in only when
  ``cont_batching || batch.n_tokens == 0``). With ``batch_wait_ms`` > 0 the batch waits to fill:
  the batcher, once free (no batch running) with a request waiting, collects until ``ceiling``
  requests wait or ``batch_wait_ms`` has passed, then runs the batch (an in-house batcher's
  ``collect(max_batch_size, timeout)`` loop; Triton's dynamic batcher bounds the delay the same
  way with ``max_queue_delay_microseconds``). The wait a batch reports is that collection time:
  the full ``batch_wait_ms`` when batches do not fill, 0 when a full batch was waiting. This
  needs the clock: :meth:`BatchEngine.begin_step` takes ``now_s`` and, while a batch fills, returns
  None with :attr:`BatchEngine.fill_deadline_s` set.
- ``enable_prefix_caching``: vLLM's automatic prefix caching (:mod:`llm_locust.simserver.prefixcache`):
  at admission the request's leading full blocks found cached (``block_hashes``) are not
  prefilled again - only the rest takes the step's token budget and its prefill time - and the
  lookup is counted in ``prefix_cache_queries_total`` / ``prefix_cache_hits_total`` (tokens).
- ``queue_timeout_ms`` > 0: a request still waiting for its first admission this long after its
  arrival is dropped from the queue (an in-house server's "timed out in queue", answered 504):
  :meth:`BatchEngine.expire_waiting` removes them; :meth:`BatchEngine.next_expiry_s` says when
  the next one is due.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

from llm_locust.simserver.prefixcache import PrefixCache


class FinishReason(str, enum.Enum):
    """Why a request left the engine (the ``finished_reason`` label of ``vllm:request_success``)."""

    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"


BATCHING_MODES: tuple[str, ...] = ("continuous", "static")
"""Scheduler kinds: continuous batching (vLLM V1) or static batches run to completion."""


class QueueFullError(RuntimeError):
    """The waiting queue is at ``max_queue`` beyond the free batch slots (the server answers 429)."""


@dataclass(slots=True, kw_only=True)
class SimRequest:
    """One request inside the engine.

    Attributes
    ----------
    request_id : str
        Unique id.
    prompt_tokens : int
        Prompt length, tokens (>= 1).
    max_tokens : int
        Output ceiling, tokens (>= 1).
    stop_after_tokens : int
        Output length at which the sequence ends, 1..max_tokens; equal to ``max_tokens`` when
        ``ignore_eos`` (finish ``length``), smaller for an early EOS (finish ``stop``).
    generated_tokens : int
        Tokens produced so far.
    counted_prompt : bool
        Set once the prompt was counted in ``prompt_tokens_total`` (a recompute after a
        preemption is not counted again).
    arrival_s : float, default 0.0
        When the request reached the engine, s on the clock of ``begin_step``'s ``now_s``
        (the driver's loop clock); used by static batching's batch wait.
    block_hashes : tuple of bytes, default ()
        Chained hashes of the prompt's full KV blocks (:func:`~llm_locust.simserver.prefixcache.block_hashes`);
        read only with prefix caching on (empty: nothing to find or cache).
    cached_tokens : int, default 0
        Prompt tokens its first admission found in the prefix cache (vLLM ``num_cached_tokens``).
    """

    request_id: str
    prompt_tokens: int
    max_tokens: int
    stop_after_tokens: int
    generated_tokens: int = 0
    counted_prompt: bool = False
    arrival_s: float = 0.0
    block_hashes: tuple[bytes, ...] = ()
    cached_tokens: int = 0

    @property
    def context_tokens(self) -> int:
        """KV tokens the request holds while running: prompt + generated."""
        return self.prompt_tokens + self.generated_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class StepPlan:
    """What :meth:`BatchEngine.begin_step` decided for one step.

    Attributes
    ----------
    batch : tuple of str
        Ids of the sequences in the batch (running order), B = ``len(batch)``.
    admitted : tuple of str
        Ids admitted (prefilled) in this step, FCFS order.
    preempted : tuple of str
        Ids preempted back to the waiting queue at the start of this step.
    prefill_tokens : int
        Context tokens prefilled in this step (those found in the prefix cache left out).
    duration_ms : float
        Step time, ms (formula in the module docstring).
    batch_wait_ms : float or None, default None
        Static batching only, in the step that forms a new batch: how long the batcher held
        the batch open to fill, ms - from when it was free (the previous batch done) and a
        request waited, to the start; 0 when a full batch was waiting. None otherwise.
    cached_tokens : int, default 0
        Context tokens of the admitted requests found in the prefix cache (not prefilled).
    """

    batch: tuple[str, ...]
    admitted: tuple[str, ...]
    preempted: tuple[str, ...]
    prefill_tokens: int
    duration_ms: float
    batch_wait_ms: float | None = None
    cached_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenOutput:
    """One token produced for one request at the end of a step.

    ``token_index`` counts from 0 over the request's whole output (it continues after a
    preemption); ``finish_reason`` is set on the request's last token only.
    """

    request_id: str
    token_index: int
    finish_reason: FinishReason | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StepResult:
    """A finished step: its plan and the tokens it produced (batch order)."""

    plan: StepPlan
    outputs: tuple[TokenOutput, ...]


@dataclass(slots=True, kw_only=True)
class BatchEngine:
    """The scheduler state and its counters.

    Parameters are those of ``SimConfig`` with the same names (times in ms, sizes in tokens);
    ``batching`` is ``"continuous"`` or ``"static"`` (module docstring); ``block_size`` is the
    KV block of the prefix cache, tokens.
    Counters (cumulative since start): ``prompt_tokens_total`` (each request's prompt once, at
    its first admission, cached tokens included, as vLLM counts ``vllm:prompt_tokens``),
    ``prompt_tokens_cached_total`` (of those, found in the prefix cache),
    ``generation_tokens_total``, ``num_preemptions_total`` and ``finished_total`` by
    :class:`FinishReason` (aborts included); the prefix cache's own in :attr:`prefix_cache`.
    """

    max_num_seqs: int = 8
    max_num_batched_tokens: int = 8192
    decode_base_ms: float = 20.0
    decode_per_seq_ms: float = 1.0
    prefill_ms_per_token: float = 0.1
    kv_capacity_tokens: int = 65536
    max_queue: int = 0
    slowdown: float = 1.0
    effective_max_num_seqs: int = 0
    batching: str = "continuous"
    batch_wait_ms: float = 0.0
    roofline: bool = False
    queue_timeout_ms: float = 0.0
    enable_prefix_caching: bool = False
    block_size: int = 16
    waiting: deque[SimRequest] = field(init=False, default_factory=deque)
    running: list[SimRequest] = field(init=False, default_factory=list)
    prompt_tokens_total: int = field(init=False, default=0)
    prompt_tokens_cached_total: int = field(init=False, default=0)
    generation_tokens_total: int = field(init=False, default=0)
    num_preemptions_total: int = field(init=False, default=0)
    finished_total: dict[FinishReason, int] = field(
        init=False, default_factory=lambda: {reason: 0 for reason in FinishReason}
    )
    fill_deadline_s: float | None = field(init=False, default=None)
    """Static batching: when the batch now filling starts at the latest (``now_s`` clock), while
    :meth:`begin_step` returned None with requests waiting; None otherwise."""
    prefix_cache: PrefixCache | None = field(init=False, default=None)
    """The prefix cache and its counters (None with ``enable_prefix_caching`` off: nothing is
    looked up, as in vLLM)."""
    _plan: StepPlan | None = field(init=False, default=None, repr=False)
    _free_since_s: float | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        if self.batching not in BATCHING_MODES:
            raise ValueError(f"batching must be one of {list(BATCHING_MODES)}, got {self.batching!r}")
        if self.enable_prefix_caching:
            capacity = max(1, self.kv_capacity_tokens // self.block_size)
            self.prefix_cache = PrefixCache(block_size=self.block_size, capacity_blocks=capacity)

    @property
    def ceiling(self) -> int:
        """The batch ceiling the scheduler applies: ``effective_max_num_seqs`` when set, else
        ``max_num_seqs``."""
        return self.effective_max_num_seqs or self.max_num_seqs

    @property
    def num_running(self) -> int:
        """Sequences in the running batch."""
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        """Requests in the waiting queue."""
        return len(self.waiting)

    @property
    def kv_used_tokens(self) -> int:
        """KV tokens held by the running sequences (prompt + generated each)."""
        return sum(r.context_tokens for r in self.running)

    @property
    def kv_usage_ratio(self) -> float:
        """KV cache usage, 0..1: held / capacity (``vllm:kv_cache_usage_perc``)."""
        return self.kv_used_tokens / self.kv_capacity_tokens

    @property
    def has_work(self) -> bool:
        """True when a request is running or waiting."""
        return bool(self.running or self.waiting)

    def add_request(self, request: SimRequest) -> None:
        """Append ``request`` to the waiting queue (FCFS).

        Raises
        ------
        QueueFullError
            When ``max_queue > 0`` and the waiting requests already number ``max_queue`` plus the
            free batch slots (``max_num_seqs - running``).
        ValueError
            When the request's counts are out of range or prompt + max_tokens exceeds the KV
            capacity (it could never finish).
        """
        if request.prompt_tokens < 1 or not 1 <= request.stop_after_tokens <= request.max_tokens:
            raise ValueError(f"bad token counts in {request!r}")
        if request.prompt_tokens + request.max_tokens > self.kv_capacity_tokens:
            raise ValueError("prompt_tokens + max_tokens exceeds kv_capacity_tokens")
        free_slots = max(0, self.ceiling - len(self.running))
        if self.max_queue > 0 and len(self.waiting) >= self.max_queue + free_slots:
            raise QueueFullError(f"{len(self.waiting)} requests waiting (max_queue={self.max_queue})")
        self.waiting.append(request)

    def abort_request(self, request_id: str) -> bool:
        """Remove a waiting or running request, freeing its KV; False if it is not in the engine."""
        for queue in (self.waiting, self.running):
            for request in queue:
                if request.request_id == request_id:
                    queue.remove(request)
                    self.finished_total[FinishReason.ABORT] += 1
                    return True
        return False

    def expire_waiting(self, now_s: float) -> list[SimRequest]:
        """Drop the waiting requests never admitted whose wait reached ``queue_timeout_ms``.

        Parameters
        ----------
        now_s : float
            The current instant on the clock of the requests' ``arrival_s``, s.

        Returns
        -------
        list of SimRequest
            The requests dropped, in queue order (none when ``queue_timeout_ms`` is 0); each is
            counted in ``finished_total[ABORT]``.
        """
        if self.queue_timeout_ms <= 0:
            return []
        limit_s = self.queue_timeout_ms / 1000.0
        expired = [r for r in self.waiting if not r.counted_prompt and now_s - r.arrival_s >= limit_s]
        for request in expired:
            self.waiting.remove(request)
            self.finished_total[FinishReason.ABORT] += 1
        return expired

    def next_expiry_s(self) -> float | None:
        """When the next waiting request times out (``arrival_s`` clock, s); None without one."""
        if self.queue_timeout_ms <= 0:
            return None
        arrivals = [r.arrival_s for r in self.waiting if not r.counted_prompt]
        return min(arrivals) + self.queue_timeout_ms / 1000.0 if arrivals else None

    def begin_step(self, now_s: float = 0.0) -> StepPlan | None:
        """Preempt, admit and time the next step; None when there is no work, or (static
        batching) while the next batch is still filling (then :attr:`fill_deadline_s` is set).

        Parameters
        ----------
        now_s : float, default 0.0
            The current instant on the clock of the requests' ``arrival_s`` (only static
            batching with ``batch_wait_ms`` > 0 reads it).

        Raises
        ------
        RuntimeError
            When the previous step was begun but not ended.
        """
        if self._plan is not None:
            raise RuntimeError("begin_step called twice without end_step")
        self.fill_deadline_s = None
        if not self.has_work:
            return None
        batch_wait_ms = None
        if self.batching == "static" and not self.running:
            if self._free_since_s is None:
                self._free_since_s = now_s
            collect_s = max(self.waiting[0].arrival_s, self._free_since_s)
            deadline_s = collect_s + self.batch_wait_ms / 1000.0
            if len(self.waiting) < self.ceiling and now_s < deadline_s:
                self.fill_deadline_s = deadline_s
                return None
            batch_wait_ms = max(0.0, 1000.0 * (now_s - collect_s))
            self._free_since_s = None
        preempted: list[str] = []
        while self.running and self.kv_used_tokens + len(self.running) > self.kv_capacity_tokens:
            victim = self.running.pop()
            self.waiting.appendleft(victim)
            self.num_preemptions_total += 1
            preempted.append(victim.request_id)
        admitted: list[str] = []
        prefill = cached = 0
        cache = self.prefix_cache
        budget = self.max_num_batched_tokens - len(self.running)
        free_kv = self.kv_capacity_tokens - self.kv_used_tokens - len(self.running)
        static_busy = self.batching == "static" and bool(self.running)
        while not preempted and not static_busy and self.waiting and len(self.running) < self.ceiling:
            head = self.waiting[0]
            hit = cache.hit_tokens(head.block_hashes, head.context_tokens) if cache is not None else 0
            cost = head.context_tokens - hit
            alone = not self.running
            if (cost > budget and not alone) or head.context_tokens + 1 > free_kv:
                break
            self.waiting.popleft()
            self.running.append(head)
            admitted.append(head.request_id)
            budget -= cost
            free_kv -= head.context_tokens + 1
            prefill += cost
            cached += hit
            if cache is not None:
                cache.admit(head.block_hashes, num_tokens=head.context_tokens, hit_tokens=hit,
                            preempted=head.counted_prompt)  # fmt: skip
            if not head.counted_prompt:
                head.counted_prompt = True
                head.cached_tokens = hit
                self.prompt_tokens_total += head.prompt_tokens
                self.prompt_tokens_cached_total += hit
        batch_size = len(self.running)
        if self.roofline:
            decode_ms = max(self.decode_base_ms, self.decode_per_seq_ms * batch_size)
        else:
            decode_ms = self.decode_base_ms + self.decode_per_seq_ms * batch_size
        duration_ms = self.slowdown * (decode_ms + self.prefill_ms_per_token * prefill)
        self._plan = StepPlan(
            batch=tuple(r.request_id for r in self.running),
            admitted=tuple(admitted),
            preempted=tuple(preempted),
            prefill_tokens=prefill,
            duration_ms=duration_ms,
            batch_wait_ms=batch_wait_ms if admitted else None,
            cached_tokens=cached,
        )
        return self._plan

    def end_step(self, plan: StepPlan) -> StepResult:
        """Give each sequence of ``plan``'s batch still running one token; retire finished ones.

        Raises
        ------
        RuntimeError
            When ``plan`` is not the step begun last.
        """
        if plan is not self._plan:
            raise RuntimeError("end_step needs the plan returned by the last begin_step")
        self._plan = None
        in_batch = set(plan.batch)
        outputs: list[TokenOutput] = []
        for request in [r for r in self.running if r.request_id in in_batch]:
            request.generated_tokens += 1
            self.generation_tokens_total += 1
            reason = None
            if request.generated_tokens >= request.stop_after_tokens:
                reason = FinishReason.LENGTH if request.stop_after_tokens == request.max_tokens else FinishReason.STOP
                self.running.remove(request)
                self.finished_total[reason] += 1
            outputs.append(
                TokenOutput(
                    request_id=request.request_id,
                    token_index=request.generated_tokens - 1,
                    finish_reason=reason,
                )
            )
        return StepResult(plan=plan, outputs=tuple(outputs))

    def step(self) -> StepResult | None:
        """:meth:`begin_step` then :meth:`end_step` at once (for tests); None when idle."""
        plan = self.begin_step()
        return None if plan is None else self.end_step(plan)
