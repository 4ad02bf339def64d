"""The workload options (``--input-tokens``, ``--dataset``, ...) and their checks.

Added to Locust's parser by :func:`llm_locust.options.add_options`; checked together by
:func:`validate_workload_options`, called from :func:`llm_locust.options.validate_options`
(``llm-locust run`` calls it before any process starts: a bad dataset exits 2, naming the line).
"""

from __future__ import annotations

from llm_locust.argtypes import non_negative_float, non_negative_int


def add_workload_options(group) -> None:
    """Add the workload options to Locust's parser (or an argparse group)."""
    group.add_argument(
        "--input-tokens", type=non_negative_int, default=0, metavar="N",
        help="Prompts of exactly N tokens as the server counts them (chat template included), sized with "
             "--tokenizer or by asking the server (usage.prompt_tokens of max_tokens 1 probes); 0 = the prompt set",
    )  # fmt: skip
    group.add_argument(
        "--input-tokens-stddev", type=non_negative_float, default=0.0, metavar="TOKENS",
        help="Standard deviation of the prompt length (normal, clipped at the shortest buildable prompt); 0 = fixed",
    )  # fmt: skip
    group.add_argument(
        "--shared-prefix-tokens", type=non_negative_int, default=0, metavar="K",
        help="With --input-tokens: the first K tokens of the text are the same in every prompt (prefix caching)",
    )  # fmt: skip
    group.add_argument(
        "--dataset", default="", metavar="FILE",
        help="Prompts from a ShareGPT JSON, a JSONL of {\"prompt\"|\"messages\", \"max_tokens\"?} or a text file "
             "(one prompt per line), in a --seed order; per-item output lengths honoured",
    )  # fmt: skip
    group.add_argument(
        "--session-turns", type=non_negative_int, default=0, metavar="K",
        help="Multi-turn sessions: each user holds a conversation of K turns, each turn sending the whole history "
             "(its user messages from the prompts above, the server's real answers; --protocol openai-chat); 0 = single turns",
    )  # fmt: skip
    group.add_argument(
        "--think-time-s", type=non_negative_float, default=0.0, metavar="S",
        help="With --session-turns: pause between a turn's answer and the next turn, s",
    )  # fmt: skip
    group.add_argument("--seed", type=int, default=0, help="Seed of the prompt words, lengths and dataset order")
    group.add_argument(
        "--input-calibration", default="", metavar="JSON",
        help="Prompt sizing measured before the run (set by llm-locust run, so workers need not probe the server)",
        include_in_web_ui=False,
    )  # fmt: skip


def validate_workload_options(options) -> None:
    """Check the workload options together; read and check ``--dataset``.

    Raises
    ------
    ValueError
        One line naming the flag (and for a dataset, the file and line).
    """

    def get(name, default=None):
        return getattr(options, name, default)

    input_tokens = get("input_tokens", 0) or 0
    if get("dataset") and input_tokens:
        raise ValueError("--dataset and --input-tokens: give one of them")
    if input_tokens and (get("prompts_file") or get("payload_file")):
        raise ValueError("--input-tokens builds the prompts: leave out --prompts-file/--payload-file")
    if get("dataset") and (get("prompts_file") or get("payload_file")):
        raise ValueError("--dataset holds the prompts: leave out --prompts-file/--payload-file")
    if not input_tokens and (get("shared_prefix_tokens", 0) or get("input_tokens_stddev", 0.0)):
        raise ValueError("--shared-prefix-tokens and --input-tokens-stddev need --input-tokens")
    if input_tokens and get("shared_prefix_tokens", 0) >= input_tokens:
        raise ValueError(
            f"--shared-prefix-tokens ({get('shared_prefix_tokens')}) must be below --input-tokens ({input_tokens})"
        )
    if get("session_turns", 0):
        if get("protocol", "openai-chat") != "openai-chat":
            raise ValueError("--session-turns sends the history as chat messages: only --protocol openai-chat")
        if get("payload_file"):
            raise ValueError("--session-turns builds each turn's body: leave out --payload-file")
    elif get("think_time_s", 0.0):
        raise ValueError("--think-time-s is the pause between a session's turns: it needs --session-turns")
    if get("dataset"):
        from llm_locust.client.workload.dataset import load_dataset

        try:
            dataset = load_dataset(get("dataset"))
        except OSError as exc:
            raise ValueError(f"--dataset {get('dataset')}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise ValueError(f"--dataset: {exc}") from None
        if dataset.has_messages and get("protocol", "openai-chat") != "openai-chat":
            raise ValueError(f"--dataset {get('dataset')} holds chat messages: only --protocol openai-chat sends them")
