"""The master's side of a run: load shapes, record intake, server capture, the run directory.

In: record batches from the workers (:mod:`~llm_locust.master.shipping`), the server's
``/metrics`` (:mod:`~llm_locust.master.scraper`) and log (:mod:`~llm_locust.master.logfollow`,
:mod:`~llm_locust.master.servercapture`), the ladder or baseline shape
(:mod:`~llm_locust.master.shapes`). Out: the run directory (:mod:`~llm_locust.master.runwriter`,
tied to Locust's lifecycle by :mod:`~llm_locust.master.recorder`) and the end-of-run
``client_report.json`` (:mod:`~llm_locust.master.clientreport`).
"""
