"""--rate / --rates and the rate shape's settings, parsed by Locust's own parser."""

from __future__ import annotations

import pytest
from locust import argument_parser

from llm_locust.master.rateshape import RateSettings
from llm_locust.options import add_options, parse_rates, rate_ladder, validate_options


def parse(*argv: str):
    parser = argument_parser.get_empty_argument_parser()
    argument_parser.setup_parser_arguments(parser)
    add_options(parser)
    return parser.parse_args(list(argv))


def test_rate_ladder_from_either_flag():
    assert rate_ladder(parse("--rate", "2.5")) == [2.5]
    assert rate_ladder(parse("--rates", "1, 2,4.5")) == [1.0, 2.0, 4.5]
    settings = RateSettings.from_options(parse("--rates", "1,2", "--arrival", "poisson", "--rate-seed", "5",
                                               "--max-users", "7", "--dwell-s", "9", "--warmup-s", "2"))  # fmt: skip
    assert (settings.rates_rps, settings.seed, settings.max_users, settings.dwell_s) == ((1.0, 2.0), 5, 7, 9.0)
    assert settings.arrival == "poisson" and settings.burstiness == 1.0
    drawn = RateSettings.from_options(parse("--rate", "3"))
    assert 0 <= drawn.seed < 2**31


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rate", "1", "--rates", "1,2"], "give one of them"),
        ([], "needs --rate"),
        (["--rates", "2,1"], "--rates"),
        (["--rates", "0,1"], "--rates"),
        (["--rates", "1,nan"], "--rates"),
        (["--rates", "a"], "--rates"),
    ],
)
def test_bad_rates(argv, message):
    with pytest.raises(ValueError, match=message):
        rate_ladder(parse(*argv))


def test_bad_values_are_refused_by_validate_and_the_parser():
    with pytest.raises(ValueError, match="--rates"):
        validate_options(parse("--rates", "4,4"))
    with pytest.raises(SystemExit):
        parse("--burstiness", "0")
    with pytest.raises(SystemExit):
        parse("--arrival", "uniform")
    with pytest.raises(SystemExit):
        parse("--max-users", "0")
    assert parse_rates("0.5") == [0.5]
