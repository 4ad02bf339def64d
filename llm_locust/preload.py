"""Import modules in the background, at the lowest CPU priority, before they are needed.

The end of a run imports heavy modules (pandas, matplotlib, the analysis) for the client report
and the analysis; imported only then, they stand between the test's end and the process's exit
(seconds on a busy machine). :func:`preload_modules` imports them during the run instead, in a
native thread that asks the OS for the lowest priority (``nice`` 19, per thread on Linux), so it
takes CPU from the load test only when a core would otherwise be idle. In a gevent-patched
process (a Locust master) the thread comes from gevent's thread pool: a patched
``threading.Thread`` would be a greenlet and block the event loop for the whole import.

An import that fails here is left to fail again, with its message, where the module is used.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections.abc import Sequence


def _lower_priority() -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):  # not Linux: the thread keeps its priority
        pass


def _import_all(modules: Sequence[str]) -> None:
    _lower_priority()
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # reported where the module is used
            return


def _gevent_patched() -> bool:
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and monkey.is_module_patched("threading")


def preload_modules(modules: Sequence[str]) -> None:
    """Start importing ``modules`` (in order) in a low-priority native thread; return at once.

    Parameters
    ----------
    modules : sequence of str
        Dotted module names. Ones already imported cost nothing.
    """
    pending = [name for name in modules if name not in sys.modules]
    if not pending:
        return
    if _gevent_patched():
        import gevent

        gevent.get_hub().threadpool.spawn(_import_all, pending)
        return
    threading.Thread(target=_import_all, args=(pending,), name="llm-locust-preload", daemon=True).start()
