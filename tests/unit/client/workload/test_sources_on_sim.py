"""Request sources through LLMUser and the real HTTP stack, against the embedded server, whose
prompt count is a documented formula (``llm_locust/simserver/openai_request.py``: a chat prompt
counts its content's whitespace-separated words + 4 per message + 3; a text prompt its words + 1).
"""

from __future__ import annotations

import json

import pytest

from llm_locust.run.demo import SIM_MODEL, start_sim_server
from llm_locust.run.launcher import free_port, stop_process
from tests.locust_env import make_users

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

CHAT_TEMPLATE_TOKENS = 4 + 3


@pytest.fixture(scope="module")
def sim_url(tmp_path_factory):
    port = free_port()
    server = start_sim_server(port=port, max_num_seqs=4, log_path=tmp_path_factory.mktemp("sim") / "server.log")
    yield f"http://127.0.0.1:{port}"
    stop_process(server, grace_s=10)


def _records(users, fired, n):
    for i in range(n):
        users[i % len(users)].stream_one()
    return [event["context"]["llm_record"] for event in fired]


@pytest.mark.parametrize("protocol", ["openai-chat", "openai-completions"])
def test_sized_prompts_count_their_target_on_the_server(sim_url, protocol):
    users, environment, fired = make_users(
        sim_url, 2, "--model", SIM_MODEL, "--protocol", protocol, "--input-tokens", "40",
        "--input-tokens-stddev", "6", "--max-tokens", "2",
    )  # fmt: skip
    records = _records(users, fired, 12)

    assert users[0].config is users[1].config  # one source for the process
    assert all(r.ok for r in records)
    assert [r.prompt_tokens for r in records] == [r.prompt_tokens_target for r in records]
    assert len({r.prompt_tokens_target for r in records}) > 1


def test_a_dataset_sends_its_prompts_with_their_own_output_lengths(sim_url, tmp_path):
    dataset = tmp_path / "d.jsonl"  # item k: k + 1 words, max_tokens k + 2; one chat item of 2 messages
    lines = [json.dumps({"prompt": " ".join(["w"] * (k + 1)), "max_tokens": k + 2}) for k in range(5)]
    lines.append(json.dumps({"messages": [{"role": "system", "content": "a b"}, {"role": "user", "content": "c"}]}))
    dataset.write_text("\n".join(lines))
    users, _, fired = make_users(sim_url, 1, "--model", SIM_MODEL, "--dataset", str(dataset), "--max-tokens", "9")
    records = _records(users, fired, 12)  # two passes over the 6 items

    assert all(r.ok for r in records)
    texts = [r for r in records if r.max_tokens != 9]
    chats = [r for r in records if r.max_tokens == 9]
    assert len(texts) == 10 and len(chats) == 2
    assert all(r.max_tokens == r.prompt_tokens - CHAT_TEMPLATE_TOKENS + 1 for r in texts)
    assert all(r.output_tokens == r.max_tokens for r in records)
    assert sorted({r.max_tokens for r in texts}) == [2, 3, 4, 5, 6]
    assert all(r.prompt_tokens == 2 + 1 + 2 * 4 + 3 for r in chats)  # two messages, 3 words
