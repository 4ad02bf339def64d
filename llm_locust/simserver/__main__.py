"""``python -m llm_locust.simserver [options]``: run the simulated server (same flags as
``llm-locust sim-server``)."""

from __future__ import annotations

import argparse

from llm_locust.simserver import add_arguments, run_from_args


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` (default ``sys.argv[1:]``) and serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(
        prog="python -m llm_locust.simserver",
        description="Simulated continuous-batching LLM server (vLLM-compatible API, logs, metrics).",
    )
    add_arguments(parser)
    run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    main()
