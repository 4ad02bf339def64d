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
import time
import urllib.request
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from llm_locust.run.launcher import free_port
from tests.conftest import SHARED, can_raise_priority, require_shared

REAL_SERVERS = SHARED / "real-servers"
SETUP_LOCK = Path.home() / ".cache" / "llm-locust" / "real-servers-setup.lock"
"""The lock every ``setup.sh`` run of the tests holds (``flock``): one setup at a time."""
PRESTART_LOCK = Path.home() / ".cache" / "llm-locust" / "real-servers-prestart.lock"
"""Held by each pre-start (:func:`prestart`) until its ``serve.sh`` returns: one start at a time."""


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


@dataclass(frozen=True)
class ServerSpec:
    """One real-server configuration: ``real-servers/<name>``, ``serve.sh`` arguments, environment.

    Attributes
    ----------
    name : str
        ``vllm-cpu`` or ``llama-cpp``.
    serve_args : tuple of str
        Extra arguments for ``serve.sh`` (e.g. ``("--max-num-seqs", "4")``).
    env : dict
        Extra environment (``MODEL``, ``SLOTS``…).
    """

    name: str
    serve_args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


VLLM_SEQS2 = ServerSpec("vllm-cpu", ("--max-num-seqs", "2"), {"MODEL": "slow"})
"""The ``--max-num-seqs`` A/B's first round (``tests/real/conftest.py``)."""

VLLM_SEQS8 = ServerSpec("vllm-cpu", ("--max-num-seqs", "8"), {"MODEL": "slow"})
"""The A/B's second round, which also serves ``test_real_vllm_inputs``."""

VLLM_SEQS4 = ServerSpec("vllm-cpu", ("--max-num-seqs", "4"), {"MODEL": "slow"})
"""A scheduler ceiling of 4 (``tests/real/test_real_verdict.py``); started by its test, not
pre-started (a sixth start in the chain would run into the other vLLM modules' ladders)."""

VLLM_SEQS1 = ServerSpec("vllm-cpu", ("--max-num-seqs", "1"), {"MODEL": "slow"})
"""Batching off by configuration (``tests/real/test_real_verdict.py``)."""

VLLM_KV_BLOCKS = 5
"""``--num-gpu-blocks-override`` of :data:`VLLM_KV`: one block is vLLM's null block, 4 hold requests."""

VLLM_KV = ServerSpec(
    "vllm-cpu",
    ("--max-num-seqs", "8", "--num-gpu-blocks-override", str(VLLM_KV_BLOCKS), "--max-model-len", "256"),
    {"MODEL": "slow"},
)
"""A KV cache too small for its ``max_num_seqs`` (``tests/real/test_real_verdict.py``): 5 blocks of
128 tokens (the CPU build's block size), and ``--max-model-len 256`` so that vLLM's start-up check
(one request of ``max_model_len`` must fit) passes."""

VLLM_NO_PREFIX = ServerSpec("vllm-cpu", ("--max-num-seqs", "8", "--no-enable-prefix-caching"), {"MODEL": "slow"})
""":data:`VLLM_SEQS8` with its prefix cache off (on by default in vLLM V1):
``tests/real/test_real_vllm_prefix.py``'s round without prefix caching."""

PRESTARTED_BY_MODULE = {
    "test_real_verdict.py": (VLLM_SEQS1, VLLM_KV),
    "test_real_vllm.py": (VLLM_SEQS2, VLLM_SEQS8),
    "test_real_vllm_ab.py": (VLLM_SEQS2, VLLM_SEQS8),
    "test_real_vllm_inputs.py": (VLLM_SEQS8,),
    "test_real_vllm_prefix.py": (VLLM_SEQS8,),
}
"""The servers :func:`prestart` starts during the end-to-end tests, by the real-server test module
that needs them (the A/B fixture uses both vLLMs, one after the other). The prefix test's
no-caching vLLM is not among them: the chain of starts ran late, its start (the fifth) fell into
tests/real/test_real_vllm.py's ladder and took a quarter of the 4-user step's throughput
(115 tok/s between 138 at 2 users and 152 at 8, a CI-like run); it starts with its own test."""


@dataclass
class _Started:
    """A server being started by ``serve.sh``: where, with what, and the ``serve.sh`` process."""

    spec: ServerSpec
    url: str
    log_path: Path
    full_env: dict[str, str]
    serve: subprocess.Popen
    pid: int = 0
    """The server's PID, once ``serve.sh`` printed it (its last line, on success)."""
    launched_at_s: float = field(default_factory=time.time)
    """When the launch began (Unix s): a PID file older than this is another run's."""


def _launch(spec: ServerSpec, log_path: Path, *, idle: bool) -> _Started:
    """Run the setup (under :data:`SETUP_LOCK`) then ``serve.sh`` for ``spec``, without waiting."""
    folder = REAL_SERVERS / spec.name
    _require(folder)
    SETUP_LOCK.parent.mkdir(parents=True, exist_ok=True)
    port = free_port()
    defaults = {"DTYPE": vllm_dtype()} if spec.name == "vllm-cpu" else {}
    full_env = {**defaults, **os.environ, **spec.env, "PORT": str(port), "LOG": str(log_path)}
    serve = ["bash", str(folder / "serve.sh"), *(VLLM_TEST_ARGS if spec.name == "vllm-cpu" else []), *spec.serve_args]
    # waits for a background setup of this session (start_background_setup), then finds it done
    setup = f"flock {shlex.quote(str(SETUP_LOCK))} bash -c {shlex.quote(_setup_script(spec.name))}"
    script = f"{setup} && {shlex.join(serve)}"
    command = ["bash", "-c", script]
    if idle:  # only the CPU time nothing else wants; claim() restores the server's priority
        # and one start at a time: two vLLMs starting at once beside the first end-to-end tests
        # (side by side runs on both cores) coincided with a load worker's loop lagging 84 ms.
        # The lock's descriptor is closed for serve.sh, whose server outlives it (9>&-).
        script = f"exec 9>{shlex.quote(str(PRESTART_LOCK))} && flock 9 && {setup} && {shlex.join(serve)} 9>&-"
        command = ["chrt", "--idle", "0", "nice", "-n", "19", "bash", "-c", script]
    process = subprocess.Popen(command, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return _Started(spec, f"http://127.0.0.1:{port}", log_path, full_env, process)


def _wait_ready(started: _Started, timeout_s: float, *, require_exit_0: bool = True) -> None:
    """Wait for ``serve.sh`` to report the server up (sets ``started.pid``); stop it and fail the
    test otherwise. Without ``require_exit_0``, a server that answers ``/health`` counts as up
    whatever ``serve.sh`` said (its own wait ran out while the server started at idle priority)."""
    try:
        stdout, stderr = started.serve.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        started.serve.kill()
        stdout, stderr = started.serve.communicate()
    words = stdout.split()
    pid = _recorded_pid(started)
    if started.serve.returncode == 0 and words and words[-1].isdigit():
        started.pid = int(words[-1])
    elif not require_exit_0 and pid and _running(pid) and _healthy(started.url):
        started.pid = pid
    else:
        _stop(started)
        tail = started.log_path.read_text()[-3000:] if started.log_path.exists() else ""
        pytest.fail(f"{started.spec.name} did not start: {stderr}\n{tail}")


_HOMES = {
    "vllm-cpu": ("LLM_LOCUST_VLLM_HOME", Path.home() / ".cache" / "llm-locust" / "vllm-cpu"),
    "llama-cpp": ("LLM_LOCUST_LLAMACPP_HOME", Path.home() / ".cache" / "llm-locust" / "llama-cpp"),
}
"""Where each ``serve.sh`` records its server's PID (``$home/server-$PORT.pid``)."""


def _recorded_pid(started: _Started) -> int:
    """The PID ``serve.sh`` recorded for this server's port during this launch (0 when none: a
    file left by an earlier run on the same port names a process this session did not start)."""
    variable, default = _HOMES[started.spec.name]
    path = Path(started.full_env.get(variable) or default) / f"server-{started.full_env['PORT']}.pid"
    try:
        if path.stat().st_mtime < started.launched_at_s - 1:
            return 0
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def _wait_health(url: str, deadline: float, pid: int) -> None:
    """Poll ``/health`` until it answers 200, the server ``pid`` ends, or ``deadline`` (monotonic)."""
    while time.monotonic() < deadline and _running(pid) and not _healthy(url):
        time.sleep(0.5)


def _stop(started: _Started) -> None:
    subprocess.run(["bash", str(REAL_SERVERS / started.spec.name / "stop.sh")], env=started.full_env, timeout=120)


def _session_tasks(session_id: int) -> list[int]:
    """Thread ids of every process in the session ``session_id`` (``serve.sh`` starts the server
    with ``setsid``: the server and every process it spawns)."""
    tids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # the fields after the command (which may hold spaces) in parentheses: state ppid pgrp session
            fields = stat.read_text().rpartition(")")[2].split()
            if int(fields[3]) == session_id:
                tids += [int(task.name) for task in (stat.parent / "task").iterdir()]
        except (OSError, ValueError, IndexError):  # the process ended meanwhile
            continue
    return tids


def restore_priority(session_id: int) -> int:
    """Give every thread of the session ``session_id`` the normal policy (``SCHED_OTHER``) and nice 0.

    Returns
    -------
    int
        How many threads were changed.

    Raises
    ------
    PermissionError
        Without ``CAP_SYS_NICE`` (nice 19 cannot be lowered again).
    """
    tids = _session_tasks(session_id)
    for tid in tids:
        try:
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
            os.setpriority(os.PRIO_PROCESS, tid, 0)
        except ProcessLookupError:
            continue
    return len(tids)


class Prestart:
    """A real server started at idle priority ahead of the test that needs it.

    A vLLM start takes ~90 s of CPU on this 2-core machine. The end-to-end tests before the real
    ones leave most of a core idle, so the session's vLLMs are started during them, at
    ``SCHED_IDLE`` and nice 19 (it takes only CPU the tests do not want); an idle vLLM waits on its
    sockets, so it costs memory, not CPU, until its test. :meth:`claim` waits for it, puts every
    thread of the server back to normal priority, and hands it over. Only where the priority can
    be restored (root): elsewhere :func:`prestart` starts nothing and the test starts its server.
    """

    def __init__(self, started: _Started) -> None:
        self._started = started
        self._claimed = False

    def claim(self, spec: ServerSpec, log_path: Path, timeout_s: float = 1900) -> _Started | None:
        """The started server if it is ``spec`` (and not claimed yet), at normal priority; else None.

        The server keeps the log path it was started with; ``log_path`` is where the caller wants
        it, so the log is moved there by a symbolic link.
        """
        if self._claimed or self._started.spec != spec:
            return None
        self._claimed = True
        started = self._started
        deadline = time.monotonic() + timeout_s
        try:  # the setup and serve.sh, which waits up to 300 s for /health
            started.serve.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        pid = _recorded_pid(started)
        if pid and _running(pid):  # a start slower than serve.sh's wait at idle priority goes on at normal
            restore_priority(pid)
            _wait_health(started.url, deadline, pid)
        _wait_ready(started, max(1.0, deadline - time.monotonic()), require_exit_0=False)
        restore_priority(started.pid)  # again: a thread begun by an idle one during the first pass
        if log_path != self._started.log_path:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.symlink_to(self._started.log_path)
        return self._started

    def stop_unclaimed(self) -> None:
        """Stop the server when no test claimed it (the session ends)."""
        if not self._claimed:
            self._claimed = True
            if self._started.serve.poll() is None:
                self._started.serve.kill()
                self._started.serve.wait()
            _stop(self._started)


PRESTART_KEY = pytest.StashKey["list[Prestart]"]()
"""Where the session keeps its :class:`Prestart` (``config.stash``)."""


def prestart(spec: ServerSpec, log_path: Path) -> Prestart | None:
    """Start ``spec`` at idle priority (:class:`Prestart`); None where its priority could not be
    restored later (not root)."""
    if not can_raise_priority() or not (REAL_SERVERS / spec.name / "serve.sh").exists():
        return None
    return Prestart(_launch(spec, log_path, idle=True))


@contextmanager
def real_server(
    name: str,
    serve_args: list[str],
    env: dict[str, str],
    log_path: Path,
    setup_timeout_s: float = 1500,
    prestarted: Sequence[Prestart] = (),
):
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
    setup_timeout_s : float
        Longest wait for the setup and the start, s.
    prestarted : sequence of Prestart, optional
        Servers started ahead (:func:`prestart`): the first of this configuration not claimed
        yet is used.
    """
    spec = ServerSpec(name, tuple(serve_args), dict(env))
    started = None
    for candidate in prestarted:
        started = candidate.claim(spec, log_path, setup_timeout_s + 400)
        if started is not None:
            break
    if started is None:
        started = _launch(spec, log_path, idle=False)
        _wait_ready(started, setup_timeout_s + 400)
    try:
        yield started.url
    finally:
        _stop(started)
