"""Why an exchange failed: one typed value from where it is found to the record.

Built where the failure is seen (:mod:`llm_locust.client.stream`: a deadline, a reset, a
malformed event, an error sent in the stream), kept in ``Exchange.failure`` and turned into the
record's ``error_kind`` / ``error_message`` / ``e2e_ms`` by :mod:`llm_locust.client.accounting`.
"""

from __future__ import annotations

from dataclasses import dataclass

from llm_locust.analysis.schema import ErrorKind


@dataclass(slots=True, frozen=True)
class Failure:
    """One failure of a request.

    Attributes
    ----------
    kind : ErrorKind
        The failure's kind (never ``ErrorKind.NONE``).
    message : str
        What happened, for the record's ``error_message`` (shortened there).
    t : float
        When it was seen: ``time.perf_counter()`` seconds (the read that carried it, or the
        instant the deadline expired or the reset was raised); E2E ends here.
    """

    kind: ErrorKind
    message: str
    t: float
