"""llm-locust: load-test an LLM server with Locust and explain where it stops scaling."""

__version__ = "0.1.0"
