"""Import this from a locustfile to add llm-locust's options, record shipping and run directory.

>>> import llm_locust.plugin  # doctest: +SKIP

Registration happens once per process, on Locust's event hooks (``locust.events``).
"""

from __future__ import annotations

from locust import events

from llm_locust.master.recorder import install

install(events)
