"""HealGate: a missing worker's heartbeats reach Locust only after it answered a ping sent since it
went missing; stale ones (a worker that quit, its kernel delivering what it wrote) never heal it."""

from __future__ import annotations

from types import SimpleNamespace

from locust.rpc import Message
from locust.runners import STATE_MISSING, STATE_RUNNING, WorkerNode, WorkerNodes

from llm_locust.master.healgate import PING, PONG, HealGate


def gated_master(*workers: str):
    clients = WorkerNodes()
    for worker in workers:
        clients[worker] = WorkerNode(worker, state=STATE_RUNNING)
    handled, sent, handlers = [], [], {}
    runner = SimpleNamespace(
        clients=clients,
        handle_message=lambda client_id, msg: handled.append((msg.type, msg.node_id)),
        register_message=lambda name, listener: handlers.__setitem__(name, listener),
        send_message=lambda name, data=None, client_id=None: sent.append((name, data, client_id)),
    )
    gate = HealGate(SimpleNamespace(runner=runner))
    return gate, runner, clients, handled, sent, handlers


def beat(worker: str) -> Message:
    return Message("heartbeat", {"state": "running", "current_cpu_usage": 1.0}, worker)


def test_a_live_workers_messages_pass():
    _, runner, _, handled, sent, _ = gated_master("w1")
    runner.handle_message("w1", beat("w1"))
    runner.handle_message("w1", Message("stats", {}, "w1"))
    assert handled == [("heartbeat", "w1"), ("stats", "w1")] and sent == []


def test_stale_heartbeats_of_a_missing_worker_are_held_and_it_is_pinged_once_a_second():
    gate, runner, clients, handled, sent, _ = gated_master("w1", "w2")
    clients["w2"].state = STATE_MISSING
    for _ in range(5):  # the burst the network delivers once the link is back
        runner.handle_message("w2", beat("w2"))
    runner.handle_message("w2", Message("spawning_complete", {"user_classes_count": {}}, "w2"))
    runner.handle_message("w2", Message("stats", {"llm_records_count": 3}, "w2"))  # taken, as Locust takes it
    assert handled == [("stats", "w2")]
    [(name, token, to)] = sent
    assert name == PING and to == "w2" and isinstance(token, str) and len(token) == 32
    assert gate.held == {"w2": 6} and clients["w2"].state == STATE_MISSING


def test_a_worker_that_answers_heals_on_its_next_heartbeat():
    _, runner, clients, handled, sent, handlers = gated_master("w1")
    clients["w1"].state = STATE_MISSING
    runner.handle_message("w1", beat("w1"))
    [(_, token, _)] = sent
    handlers[PONG](environment=None, msg=Message(PONG, "not-the-token", "w1"))  # an answer to nothing
    runner.handle_message("w1", beat("w1"))
    assert handled == []
    handlers[PONG](environment=None, msg=Message(PONG, token, "w1"))
    runner.handle_message("w1", beat("w1"))
    assert handled == [("heartbeat", "w1")]  # Locust heals it now


def test_the_next_spell_needs_a_new_answer():
    _, runner, clients, handled, sent, handlers = gated_master("w1")
    clients["w1"].state = STATE_MISSING
    runner.handle_message("w1", beat("w1"))
    handlers[PONG](environment=None, msg=Message(PONG, sent[0][1], "w1"))
    runner.handle_message("w1", beat("w1"))
    clients["w1"].state = STATE_RUNNING  # healed by Locust
    runner.handle_message("w1", beat("w1"))
    clients["w1"].state = STATE_MISSING  # silent again
    runner.handle_message("w1", beat("w1"))
    assert handled == [("heartbeat", "w1"), ("heartbeat", "w1")]
    assert len(sent) == 2 and sent[1][1] != sent[0][1]
