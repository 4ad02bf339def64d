"""Which gateway answered a 504: its own error page, recognised in the requests' error messages.

A 504 Gateway Timeout is a gateway that gave up waiting for its upstream (RFC 9110 15.6.5). The
known gateways answer it with a fixed page of their own, which ``requests.csv`` keeps in
``error_message`` (the client's ``HTTP <status> <body>``, :func:`llm_locust.client.accounting.http_error_message`).
Without the gateway's log, the page still names the gateway and so the setting whose value cut
the requests. The pages, from each gateway's source and checked on the real gateway:

- nginx: ``<center><h1>504 Gateway Time-out</h1></center>`` then ``<hr><center>nginx[/version]</center>``
  (src/http/ngx_http_special_response.c, ``ngx_http_error_504_page`` and the error tail; seen on
  Debian's nginx 1.22.1 in tests/e2e/test_nginx_gateway.py); the timeout before the response
  header is ``proxy_read_timeout`` (ngx_http_upstream.c).

Other gateways (Envoy, HAProxy, a cloud load balancer) are left out until their page is checked on
the real thing: their 504s are still timeouts (:mod:`llm_locust.analysis.verdict.failures`), only
the setting is not named.

Written here: no library maps error pages to gateways.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

GATEWAY_PAGES: tuple[tuple[str, re.Pattern, str], ...] = (
    ("nginx", re.compile(r"<center>nginx(?:/[\w.]+)?</center>"), "proxy_read_timeout"),
)
"""``(gateway, regex over error_message, its setting behind a 504)``, tried in order."""


@dataclass(frozen=True)
class GatewayTimeouts:
    """The 504 answers one gateway's error page accounts for.

    Attributes
    ----------
    gateway : str
        Its name (``nginx``).
    setting : str
        The setting whose value makes it answer 504 (``proxy_read_timeout``).
    answers : int
        The run's 504 answers with its page.
    """

    gateway: str
    setting: str
    answers: int


def gateway_timeouts(requests: pd.DataFrame) -> GatewayTimeouts | None:
    """The gateway whose error page most of the run's 504 answers carry, None without such answers.

    Parameters
    ----------
    requests : pandas.DataFrame
        ``requests.csv`` rows with ``status_code`` and ``error_message`` (absent columns: None).

    Returns
    -------
    GatewayTimeouts or None

    >>> frame = pd.DataFrame({"status_code": [504, 504, 503],
    ...     "error_message": ["HTTP 504 <html> <center>nginx/1.22.1</center>", "HTTP 504 queue timeout",
    ...                       "HTTP 503 <html> <center>nginx</center>"]})
    >>> gateway_timeouts(frame)
    GatewayTimeouts(gateway='nginx', setting='proxy_read_timeout', answers=1)
    """
    if "status_code" not in requests.columns or "error_message" not in requests.columns:
        return None
    status = pd.to_numeric(requests["status_code"], errors="coerce")
    messages = requests.loc[status == 504, "error_message"].fillna("").astype(str)
    best: GatewayTimeouts | None = None
    for gateway, page, setting in GATEWAY_PAGES:
        answers = int(messages.str.contains(page).sum()) if len(messages) else 0
        if answers and (best is None or answers > best.answers):
            best = GatewayTimeouts(gateway, setting, answers)
    return best
