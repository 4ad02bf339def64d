"""Writing what a person reads: the pipeline from a run directory to ``report/``.

In: a loaded :class:`~analysis.rundir.Run`. :mod:`~analysis.report.pipeline` runs the analysis and
writes the files; :mod:`~analysis.report.plots` draws the PNGs. Out: ``report/`` (PNGs,
``summary.md``, ``steps.csv``).
"""
