"""The server's side of a run: what it did during the run, from its metrics and/or its log.

In: a loaded :class:`~analysis.rundir.Run` - its scraped samples (``server_metrics.csv``) and the
server-side files (:mod:`~analysis.server.files`: ``server.log`` with its arrival stamps,
``server_info.json``, a user format file). Scraped samples go through one mapping table per
server family (:mod:`~analysis.server.prometheus`, :mod:`~analysis.server.families`), the log
through one parser per family or a user regex (:mod:`~analysis.server.serverlog`,
:mod:`~analysis.server.userformat`); both give the same normalised series
(:mod:`~analysis.server.series`) and what the server says about its batching settings
(:mod:`~analysis.server.config`). :func:`analysis.server.sources.gather` reads them all.
Out: a :class:`~analysis.server.sources.ServerEvidence` (series per source, configuration,
notes) for :mod:`analysis.steps` and :mod:`analysis.verdict`.
"""
