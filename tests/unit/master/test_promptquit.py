"""The master's quit waits for its workers' answers (llm_locust/master/promptquit.py).

A MasterRunner without its network (built with ``__new__``: Locust's own ``clients``, a fake
server that records what is sent, a real greenlet group): a worker "answers" ``quit`` the way
Locust's master sees it, by leaving ``runner.clients`` (its ``quit`` message came, after its last
stats). The order of events is what is checked, with gevent's own scheduling, not elapsed time.
"""

from __future__ import annotations

import logging

import gevent
import gevent.pool
from locust.runners import STATE_MISSING, STATE_RUNNING, MasterRunner, WorkerNode, WorkerNodes

from llm_locust.master.promptquit import install_prompt_quit


class _Server:
    def __init__(self, runner, answer_after_s: dict[str, float | None]) -> None:
        self.runner, self.answer_after_s, self.sent = runner, answer_after_s, []

    def send_to_client(self, message) -> None:
        self.sent.append((message.type, message.node_id))
        delay = self.answer_after_s.get(message.node_id)
        if message.type == "quit" and delay is not None:
            gevent.spawn_later(delay, self._answer, message.node_id)

    def _answer(self, node_id: str) -> None:
        self.runner.events.append(("answer", node_id))
        if node_id in self.runner.clients:
            del self.runner.clients[node_id]
            if not self.runner.clients:  # Locust's master: "The last worker quit" -> stop, quit
                self.runner.quit()
                self.runner.events.append(("nested quit returned", node_id))


def _runner(answers: dict[str, float | None], missing: tuple[str, ...] = (), wait_s: float = 5.0) -> MasterRunner:
    runner = MasterRunner.__new__(MasterRunner)
    runner.clients = WorkerNodes()
    for node_id in answers:
        runner.clients[node_id] = WorkerNode(node_id, state=STATE_MISSING if node_id in missing else STATE_RUNNING)
    runner.events = []
    runner.server = _Server(runner, answers)
    runner.greenlet = gevent.pool.Group()
    runner.greenlet.spawn(gevent.sleep, 60)  # a runner greenlet: quit must kill it
    runner.stop = lambda send_stop_to_client=True: runner.events.append(("stop", send_stop_to_client))
    assert install_prompt_quit(_env(runner), wait_s=wait_s)
    return runner


def _env(runner):
    environment = type("Environment", (), {})()
    environment.runner = runner
    return environment


def test_quit_ends_when_every_worker_answered():
    runner = _runner({"w1": 0.01, "w2": 0.03})
    waiter = gevent.spawn(runner.quit)
    waiter.join(timeout=3.0)  # well under the 5 s bound: it ended on the answers
    assert waiter.dead and waiter.successful()
    assert runner.events[0] == ("stop", False)  # Locust's order: stop without telling the workers
    assert sorted(runner.server.sent) == [("quit", "w1"), ("quit", "w2")]
    assert ("answer", "w1") in runner.events and ("answer", "w2") in runner.events
    # the last answer's nested quit (Locust's "last worker quit") returned at once, sending nothing
    assert ("nested quit returned", "w2") in runner.events
    assert len(runner.server.sent) == 2
    assert len(runner.greenlet) == 0  # the runner's greenlets killed


def test_quit_does_not_wait_for_a_missing_worker_and_bounds_a_silent_one(caplog):
    runner = _runner({"gone": None, "ok": 0.01}, missing=("gone",))
    with caplog.at_level(logging.WARNING, logger="llm_locust.master.promptquit"):
        waiter = gevent.spawn(runner.quit)
        waiter.join(timeout=3.0)
    assert waiter.dead and ("quit", "gone") in runner.server.sent  # told, not waited for
    assert not caplog.records

    silent = _runner({"stuck": None}, wait_s=0.2)  # a short bound for this case
    with caplog.at_level(logging.WARNING, logger="llm_locust.master.promptquit"):
        waiter = gevent.spawn(silent.quit)
        waiter.join(timeout=3.0)
    assert waiter.dead and "stuck" in silent.clients
    assert any("1 of 1 workers did not answer quit" in r.getMessage() for r in caplog.records)
    assert len(silent.greenlet) == 0


def test_other_runners_are_left_alone():
    assert install_prompt_quit(_env(object())) is False


def test_final_stats_csv_holds_the_last_requests(tmp_path):
    # Locust's writer rewrites its files once a second; requests logged after its last write are
    # in the files only because closing writes them once more
    import csv

    from locust.env import Environment

    from llm_locust.master.promptquit import FinalStatsCSVFileWriter

    environment = Environment()
    writer = FinalStatsCSVFileWriter(environment, [0.5, 0.99], str(tmp_path / "run"), full_history=False)
    for k in range(7):
        environment.stats.log_request("POST", "chat", 100 + k, 10)
    environment.stats.log_error("POST", "chat", "boom")
    environment.stats.log_error("POST", "chat", "boom")
    writer.close_files()

    with open(tmp_path / "run_stats.csv", newline="") as f:
        rows = {row["Name"]: row for row in csv.DictReader(f)}
    assert int(rows["chat"]["Request Count"]) == 7 and int(rows["Aggregated"]["Request Count"]) == 7
    with open(tmp_path / "run_failures.csv", newline="") as f:
        failures = list(csv.DictReader(f))
    assert [(r["Name"], r["Error"], int(r["Occurrences"])) for r in failures] == [("chat", "boom", 2)]
    assert writer.requests_csv_filehandle.closed


def test_final_stats_history_row_holds_the_final_counts(tmp_path):
    import csv

    from locust.env import Environment

    from llm_locust.master.promptquit import FinalStatsCSVFileWriter

    environment = Environment()
    writer = FinalStatsCSVFileWriter(environment, [0.5, 0.99], str(tmp_path / "run"), full_history=False)
    history = writer.stats_history_csv_writer
    history.writerow(writer.stats_history_csv_columns)  # what the writer's loop does first
    environment.stats.log_request("POST", "chat", 100, 10)
    writer._stats_history_data_rows(history, 1000.0)  # its last tick: 1 request
    for k in range(4):
        environment.stats.log_request("POST", "chat", 110 + k, 10)
    writer.close_files()

    with open(tmp_path / "run_stats_history.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["Total Request Count"]) for r in rows] == [1, 5]  # the final counts, once
    assert int(rows[-1]["Timestamp"]) >= 1000


def test_no_history_row_without_its_header(tmp_path):
    from locust.env import Environment

    from llm_locust.master.promptquit import FinalStatsCSVFileWriter

    environment = Environment()
    writer = FinalStatsCSVFileWriter(environment, [0.5, 0.99], str(tmp_path / "run"), full_history=False)
    environment.stats.log_request("POST", "chat", 100, 10)
    writer.close_files()  # the loop never ran: no header, so no headerless row either
    assert (tmp_path / "run_stats_history.csv").read_text() == ""
