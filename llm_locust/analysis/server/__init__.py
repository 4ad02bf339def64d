"""The server's side of a run: what it did during the run, from its metrics and/or its log.

In: a loaded :class:`~llm_locust.analysis.rundir.reader.Run` - its scraped samples (``server_metrics.csv``) and the
server-side files (:mod:`~llm_locust.analysis.server.files`: ``server.log`` with its arrival stamps,
``server_info.json``, a user format file). Scraped samples go through one mapping table per
server family (:mod:`~llm_locust.analysis.server.prometheus`, :mod:`~llm_locust.analysis.server.families`), the log
through one parser per family or a user regex (:mod:`~llm_locust.analysis.server.serverlog`,
:mod:`~llm_locust.analysis.server.userformat`); both give the same normalised series
(:mod:`~llm_locust.analysis.server.series`) and what the server says about its batching settings
(:mod:`~llm_locust.analysis.server.config`). :func:`llm_locust.analysis.server.sources.gather` reads them all.
Out: a :class:`~llm_locust.analysis.server.sources.ServerEvidence` (series per source, configuration,
notes) for :mod:`llm_locust.analysis.perstep.table` and :mod:`llm_locust.analysis.verdict`.
"""
