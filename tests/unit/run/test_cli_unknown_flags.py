"""An unknown flag after a subcommand is that subcommand's error, with its own usage line (a new
user got ``usage: llm-locust [-h] {analyze} ...`` and ``llm-locust: error:`` for ``analyze --bogus``)."""

from __future__ import annotations

import pytest

from llm_locust.cli import main


@pytest.mark.parametrize(
    ("argv", "usage_has"),
    [
        (["analyze", "/tmp", "--bogus"], "RUN_DIR"),
        (["compare", "a", "b", "--bogus"], "RUN_DIR [RUN_DIR ...]"),
        (["demo", "--bogus"], "--web-linger-s"),
        (["sim-server", "--bogus"], "--max-num-seqs"),
    ],
)
def test_unknown_flag_is_the_subcommands_own_error(argv, usage_has, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"llm-locust {argv[0]}: error: unrecognized arguments: --bogus" in err
    assert err.startswith(f"usage: llm-locust {argv[0]} ") and usage_has in err, err
