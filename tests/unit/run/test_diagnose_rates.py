"""``llm-locust diagnose --rates``: the ladder it would extend, and what it refuses before any
load (the target is a loopback socket that must see no connection): ``--ladder`` with
``--rates``, a ``@N`` threshold (users) with ``--rates``, and a ``--compare-to`` round whose
ladder steps the other load axis."""

from __future__ import annotations

import pytest

from llm_locust.cli import main
from llm_locust.run.diagnose import extended_ladder
from tests.unit.analysis.compare.rounds_factory import ladder_round, rate_round
from tests.unit.run.test_fail_on_cli import connections, listener  # noqa: F401 (the fixture)


def test_extended_ladder_doubles_the_top_step_up_to_the_bound():
    assert extended_ladder([1, 2, 4], 64) == [1, 2, 4, 8, 16]
    assert extended_ladder([1, 2, 4], 12) == [1, 2, 4, 8]
    assert extended_ladder([0.5, 1.5], 6.0) == [0.5, 1.5, 3.0, 6.0]
    assert extended_ladder([2.0, 4.0], 7.9) == [2.0, 4.0]


def _refused(listener, tmp_path, capsys, argv: list[str]) -> str:  # noqa: F811
    url, sock = listener
    out = tmp_path / "out"
    assert main(["diagnose", *argv, "--host", url, "--out", str(out)]) == 2
    assert connections(sock) == 0 and not out.exists()
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rates", "1,2", "--ladder", "1,2"], "give --ladder (users) or --rates (requests/s), not both"),
        (["--rates", "1,2", "--fail-on", "output_tps@2<1"], "with --rates give @knee or no step"),
        (["--rates", "2,1"], "strictly increasing"),
    ],
)
def test_refused_before_any_load(listener, tmp_path, capsys, argv, message):  # noqa: F811
    assert message in _refused(listener, tmp_path, capsys, argv)


def test_compare_to_a_round_of_the_other_load_axis_is_refused(listener, tmp_path, capsys):  # noqa: F811
    concurrency = ladder_round(tmp_path / "ladder-round")
    rate = rate_round(tmp_path / "rate-round", rates=(1.0, 2.0))

    err = _refused(listener, tmp_path, capsys, ["--rates", "1,2", "--compare-to", str(concurrency)])
    assert "its ladder is a concurrency ladder, this diagnosis runs a request-rate ladder" in err
    err = _refused(listener, tmp_path, capsys, ["--compare-to", str(rate)])
    assert "its ladder is a request-rate ladder, this diagnosis runs a concurrency ladder" in err
