"""The launcher's SIGTERM handling (its progress line: test_progress.py)."""

from __future__ import annotations

import time


def test_sigterm_interrupts_once_then_is_only_noted_and_the_handler_is_restored():
    import os
    import signal

    import pytest

    from llm_locust.run.launcher import SigtermAsInterrupt

    before = signal.getsignal(signal.SIGTERM)
    with SigtermAsInterrupt() as signals:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises here, long before the sleep ends
        os.kill(os.getpid(), signal.SIGTERM)  # the run is being stopped: noted, not raised
        time.sleep(0.05)
        assert (signals.terminated, signals.ignored, signals.exit_code) == (True, 1, 143)
    assert signal.getsignal(signal.SIGTERM) is before


def test_ctrl_c_keeps_its_own_exit_code():
    from llm_locust.run.launcher import SigtermAsInterrupt

    with SigtermAsInterrupt() as signals:
        signals.stopping()
        assert signals.exit_code == 130


def test_a_second_ctrl_c_during_the_stop_is_only_noted_and_the_handler_is_restored():
    import signal

    import pytest

    from llm_locust.run.launcher import SigtermAsInterrupt

    # the launcher's SIGINT handler is Python's own; in the full suite an earlier in-process test
    # left another one installed (seen in CI: the first Ctrl-C raised nothing), so set it here
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with SigtermAsInterrupt() as signals:
            # raise_signal runs the Python handler before it returns: no wait for the signal to reach
            # the main thread through gevent's hub (os.kill + a 5 s sleep once missed it late in the suite)
            with pytest.raises(KeyboardInterrupt):  # the first Ctrl-C stops the run (Python's own handler)
                signal.raise_signal(signal.SIGINT)
            signals.stopping()  # what run_locust does on it
            signal.raise_signal(signal.SIGINT)  # the second one: noted, the stop goes on
            assert (signals.ignored, signals.exit_code) == (1, 130)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, outer)


def test_a_master_ended_by_a_signal_is_told_from_one_that_exited():
    import signal
    import subprocess
    import sys

    from llm_locust.run.launcher import master_killed, signal_name

    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    killed.kill()
    killed.wait(timeout=10)
    exited = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
    exited.wait(timeout=10)
    assert (master_killed(killed), master_killed(exited)) == (True, False)
    assert killed.returncode == -signal.SIGKILL
    assert (signal_name(9), signal_name(15), signal_name(99)) == ("SIGKILL", "SIGTERM", "signal 99")


def test_wait_for_exit_waits_its_grace_in_all_and_leaves_a_running_process_running():
    import subprocess
    import sys

    from llm_locust.run.launcher import wait_for_exit

    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        started = time.monotonic()
        wait_for_exit([done, running], 0.5)
        waited = time.monotonic() - started
        assert 0.5 <= waited < 5.0, waited
        assert done.returncode == 0 and running.poll() is None
    finally:
        running.kill()
        running.wait(timeout=10)
