"""The suite's pytest-xdist scheduler: every test that is not parallel-safe in one work unit.

xdist's own ``--dist loadgroup`` reads ``xdist_group`` marks by renaming each marked test's
``_nodeid``; pytest 9.2 reads a test's node id from ``_id`` instead, so the renaming is lost and
the marked tests were spread over both workers (seen: two end-to-end runs at once). This
scheduler decides the group from the test's path instead (:func:`tests.conftest.parallel_safe`),
through xdist's documented ``pytest_xdist_make_scheduler`` hook, and keeps xdist's scope
scheduling: the one serial unit holds the most tests, so it goes first, to one worker, in
collection order, and the other worker takes the parallel-safe tests one by one.
"""

from __future__ import annotations

from pathlib import Path

from xdist.scheduler.loadscope import LoadScopeScheduling

SERIAL_SCOPE = "serial"
"""The work unit of every test that is not parallel-safe."""


class SerialGroupScheduling(LoadScopeScheduling):
    """xdist's scope scheduling with two kinds of scope: :data:`SERIAL_SCOPE` for every test that
    is not parallel-safe, each parallel-safe test its own.

    Parameters
    ----------
    config : pytest.Config
    log : xdist.remote.Producer, optional
    rootdir : Path
        The directory node ids are relative to (pytest's ``rootpath``).
    """

    def __init__(self, config, log=None, *, rootdir: Path) -> None:
        super().__init__(config, log)
        self._rootdir = rootdir

    def _split_scope(self, nodeid: str) -> str:
        from tests.conftest import parallel_safe

        path = self._rootdir / nodeid.split("::", 1)[0]
        return nodeid if parallel_safe(path) else SERIAL_SCOPE
