"""The session player: history grows by the answers, a failed turn ends the session, K turns end it."""

from __future__ import annotations

import math

import pytest

from llm_locust.client.workload.session import SessionPlayer
from llm_locust.client.workload.source import CyclingPrompts, WorkItem


class _Targeted:
    """A source whose prompts carry a length target (as --input-tokens builds them)."""

    def __init__(self) -> None:
        self.n = 0

    def next_request(self) -> WorkItem:
        self.n += 1
        return WorkItem(f"q{self.n}", 8, 20.0)


def test_a_session_sends_the_history_and_ends_after_its_turns():
    player = SessionPlayer(_Targeted(), turns=3, think_time_s=0.5)
    first, turn = player.next_turn()
    session = player.session_id
    assert (first.prompt, turn, first.prompt_tokens_target, first.max_tokens) == (
        [{"role": "user", "content": "q1"}], 1, 20.0, 8)  # fmt: skip
    player.answered("a1", ok=True)
    assert player.pause_s() == 0.5
    second, turn = player.next_turn()
    assert turn == 2 and math.isnan(second.prompt_tokens_target)  # the history is in it too
    assert [m["content"] for m in second.prompt] == ["q1", "a1", "q2"]
    assert [m["role"] for m in second.prompt] == ["user", "assistant", "user"]
    player.answered("a2", ok=True)
    third, turn = player.next_turn()
    assert turn == 3 and [m["content"] for m in third.prompt] == ["q1", "a1", "q2", "a2", "q3"]
    assert player.session_id == session
    player.answered("a3", ok=True)
    assert player.pause_s() == 0.0  # the session is over: no think time before a new one
    fourth, turn = player.next_turn()
    assert turn == 1 and player.session_id != session and [m["content"] for m in fourth.prompt] == ["q4"]


def test_a_failed_turn_ends_its_session():
    player = SessionPlayer(CyclingPrompts(("x", "y"), max_tokens=4), turns=5)
    player.next_turn()
    player.answered("ok", ok=True)
    player.next_turn()
    failed = player.session_id
    player.answered("", ok=False)
    item, turn = player.next_turn()
    assert turn == 1 and player.session_id != failed and len(item.prompt) == 1


def test_a_sent_prompt_is_not_changed_by_later_turns():
    player = SessionPlayer(CyclingPrompts(("x",), max_tokens=4), turns=3)
    first, _ = player.next_turn()
    player.answered("answer", ok=True)
    player.next_turn()
    assert first.prompt == [{"role": "user", "content": "x"}]


def test_turns_below_one_are_refused():
    with pytest.raises(ValueError, match="at least 1"):
        SessionPlayer(CyclingPrompts(("x",), max_tokens=4), turns=0)


def test_the_options_check_refuses_sessions_it_cannot_send(tmp_path):
    import argparse

    from llm_locust.options import validate_options

    with pytest.raises(ValueError, match="only --protocol openai-chat"):
        validate_options(argparse.Namespace(session_turns=3, protocol="openai-completions"))
    with pytest.raises(ValueError, match="leave out --payload-file"):
        body = tmp_path / "body.json"
        body.write_text('{"messages": [{"role": "user", "content": "hi"}], "stream": true}')
        validate_options(argparse.Namespace(session_turns=3, protocol="openai-chat", payload_file=str(body)))
    with pytest.raises(ValueError, match="needs --session-turns"):
        validate_options(argparse.Namespace(think_time_s=1.0))
    validate_options(argparse.Namespace(session_turns=3, think_time_s=1.0, protocol="openai-chat"))
