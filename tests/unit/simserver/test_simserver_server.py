"""``llm-locust sim-server`` process entry: a taken port is one line and exit 2."""

from __future__ import annotations

import socket
import subprocess
import sys


def test_taken_port_is_one_line_and_exit_2():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "llm_locust.cli", "sim-server", "--port", str(port)],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip() == f"sim-server: error: cannot listen on 127.0.0.1:{port}: address already in use"
