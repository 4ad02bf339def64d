"""Writing what a person reads: the pipeline from a run directory to ``report/``.

In: a loaded :class:`~llm_locust.analysis.rundir.reader.Run`. :mod:`~llm_locust.analysis.pipeline` runs the analysis and
writes the files; :mod:`~llm_locust.analysis.report.plots` draws the PNGs. Out: ``report/`` (PNGs,
``summary.md``, ``steps.csv``).
"""
