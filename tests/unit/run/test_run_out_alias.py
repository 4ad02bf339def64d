"""``llm-locust run --out DIR`` is ``--run-dir DIR`` (diagnose and compare call their folder ``--out``;
a new user typed it on ``run`` and got Locust's "did you mean --otel")."""

from __future__ import annotations

from pathlib import Path

from llm_locust.cli import build_parser


def test_out_and_run_dir_set_the_same_folder():
    parser = build_parser("run")
    for flag in ("--out", "--run-dir"):
        args, _ = parser.parse_known_args(["run", "--host", "http://127.0.0.1:1", flag, "runs/x"])
        assert args.run_dir == Path("runs/x"), flag
