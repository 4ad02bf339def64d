"""The API key: the one place the ``Authorization`` header is built, and the one place the key is
taken off command lines.

Every request llm-locust sends to the server (the streamed requests, ``GET /v1/models``, the
Prometheus scrapes, ``GET /props`` / ``/info``) carries the same header when ``--api-key`` (or
``LLM_LOCUST_API_KEY``) is set. The key itself is never logged or written to the run directory
(:func:`llm_locust.master.recorder.redact_argv`), and never put on the command line of a process
llm-locust starts: :func:`api_key_out_of_argv` moves it to the child's environment, and
:func:`reexec_without_api_key` takes it off llm-locust's own command line (``/proc/<pid>/cmdline``,
``ps``), which every local user can read.
"""

from __future__ import annotations

import os
import sys

API_KEY_ENV = "LLM_LOCUST_API_KEY"
"""Environment variable the ``--api-key`` option reads when the flag is not given."""


def auth_headers(api_key: str | None) -> dict[str, str]:
    """``{"Authorization": "Bearer <api_key>"}``, or ``{}`` when there is no key.

    >>> auth_headers(""), list(auth_headers("sk-1"))
    ({}, ['Authorization'])
    """
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def is_api_key_flag(flag: str) -> bool:
    """``--api-key`` or an abbreviation argparse would accept for it (``--api-k``, ``--api``).

    >>> is_api_key_flag("--api-k"), is_api_key_flag("--ap"), is_api_key_flag("--api-keys")
    (True, False, False)
    """
    return len(flag) >= len("--api") and "--api-key".startswith(flag)


def api_key_out_of_argv(argv: list[str]) -> tuple[list[str], str | None]:
    """``argv`` without ``--api-key VALUE`` / ``--api-key=VALUE`` (or an abbreviation), and the key.

    Returns
    -------
    (list of str, str or None)
        The other arguments in order; the key given last (argparse's rule), None when none was.

    >>> api_key_out_of_argv(["run", "--api-key", "sk-1", "-u", "2", "--api=sk-2"])
    (['run', '-u', '2'], 'sk-2')
    """
    out: list[str] = []
    key = None
    args = iter(argv)
    for arg in args:
        flag, sep, value = arg.partition("=")
        if arg.startswith("--") and is_api_key_flag(flag):
            key = value if sep else next(args, "")
        else:
            out.append(arg)
    return out, key


def child_env(key: str | None, base: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of ``base`` (default ``os.environ``) with :data:`API_KEY_ENV` set to ``key`` unless
    ``key`` is None (an empty key given on the command line overrides one in the environment).

    >>> child_env("sk-1", {"A": "1"}), child_env(None, {"A": "1"})
    ({'A': '1', 'LLM_LOCUST_API_KEY': 'sk-1'}, {'A': '1'})
    """
    env = dict(os.environ if base is None else base)
    if key is not None:
        env[API_KEY_ENV] = key
    return env


def reexec_without_api_key() -> None:
    """When this process's command line holds ``--api-key``, replace the process (same PID) by
    the same command without it, the key in :data:`API_KEY_ENV`; otherwise return.

    The key stays readable in ``/proc/<pid>/cmdline`` only for the instant between the start of
    the interpreter and this call. ``sys.orig_argv`` is the command as started (interpreter,
    its options, the script or ``-m module``, the arguments).
    """
    argv, key = api_key_out_of_argv(list(sys.orig_argv))
    if key is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, child_env(key))
