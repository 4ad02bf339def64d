"""The run directory as the analysis reads it: the typed reader and the clocks (its schema: :mod:`llm_locust.analysis.schema`)."""
