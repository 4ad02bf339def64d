"""A malformed ``--fail-on`` is refused with exit 2 before any load is sent (issue 14): the target
is a real listening socket on loopback, and it must see no connection at all (no preflight, no
request); no run directory is made."""

from __future__ import annotations

import socket

import pytest

from llm_locust.cli import main


@pytest.fixture
def listener():
    """A loopback socket that listens (never accepts); yields its URL and the socket."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}", sock
    sock.close()


def connections(sock: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--fail-on", "ttft_p95_ms>>2"], "expected one operator"),
        (["run", "--fail-on", "p95>2"], "unknown metric 'p95'"),
        (
            ["run", "--ladder", "1,2,4", "--fail-on", "output_tps@8<500"],
            "no ladder step has 8 users; the steps: 1, 2, 4",
        ),
        (["run", "--shape", "baseline", "--fail-on", "output_tps@1<5"], "no ladder step has 1 users"),
        (["run", "--no-analyze", "--fail-on", "error_rate>0"], "drop --no-analyze"),
        (["diagnose", "--ladder", "1,2", "--max-users", "8", "--fail-on", "output_tps@16<1"], "the steps: 1, 2, 4, 8"),
        (["diagnose", "--fail-on", "bottleneck==slow"], "unknown bottleneck kind 'slow'"),
    ],
)
def test_refused_before_any_load(listener, tmp_path, capsys, argv, message):
    url, sock = listener
    run_dir = tmp_path / "run"
    out_flags = ["--run-dir", str(run_dir)] if argv[0] == "run" else ["--out", str(run_dir)]
    try:
        code = main([*argv, "--host", url, *out_flags])
    except SystemExit as exc:  # run's check exits through argparse-style SystemExit(2)
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert connections(sock) == 0 and not run_dir.exists()
