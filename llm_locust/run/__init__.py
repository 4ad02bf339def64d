"""Orchestration of whole runs from the ``llm-locust`` command: processes in, a run directory out.

:mod:`~llm_locust.run.preflight` checks the run directory and the server before anything starts;
:mod:`~llm_locust.run.launcher` starts a real Locust master and N worker processes and waits for
them; :mod:`~llm_locust.run.postrun` reads what they left (client summary, failures) and
analyses it; :mod:`~llm_locust.run.demo` adds the embedded server. Nothing here imports
:mod:`llm_locust.cli` (the CLI imports this package, never the other way round).
"""
