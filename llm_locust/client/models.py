"""Ask an OpenAI-compatible server which model it serves (and check it can be reached at all)."""

from __future__ import annotations

import socket

import requests

from llm_locust.auth import auth_headers


def served_models(base_url: str, *, api_key: str = "", timeout_s: float = 10.0) -> list[str]:
    """The model ids listed by ``GET {base_url}/v1/models``, in the server's order.

    Raises
    ------
    RuntimeError
        The server did not answer 200 with a non-empty ``data`` list of objects with a non-empty
        string ``id`` (OpenAI's list format; the message says what it sent).
    requests.RequestException
        Connection failures, unchanged.
    """
    response = requests.get(base_url.rstrip("/") + "/v1/models", headers=auth_headers(api_key), timeout=timeout_s)
    try:
        if response.status_code != 200:
            raise ValueError
        models = [item["id"] for item in response.json()["data"]]
        if not models or not all(isinstance(name, str) and name for name in models):
            raise ValueError
        return models
    except (ValueError, KeyError, IndexError, TypeError):
        raise RuntimeError(
            f"cannot tell the model: GET /v1/models answered {response.status_code} {response.text[:200]!r}; pass --model"
        ) from None


def first_served_model(base_url: str, *, api_key: str = "", timeout_s: float = 10.0) -> str:
    """The first model id listed by ``GET {base_url}/v1/models`` (errors as :func:`served_models`)."""
    return served_models(base_url, api_key=api_key, timeout_s=timeout_s)[0]


def connection_problem(exc: BaseException) -> str:
    """A short reason for a failed connection: "connection refused", "name not resolved", …"""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        if isinstance(seen, socket.gaierror):
            return "host name not resolved"
        if isinstance(seen, (requests.Timeout, TimeoutError, socket.timeout)):
            return "timed out"
        seen = (
            seen.__cause__
            or seen.__context__
            or (seen.args[0] if seen.args and isinstance(seen.args[0], BaseException) else None)
        )
    text = str(exc)
    for marker, reason in (
        ("Connection refused", "connection refused"),
        ("Name or service not known", "host name not resolved"),
        ("nodename nor servname", "host name not resolved"),
        ("timed out", "timed out"),
    ):
        if marker in text:
            return reason
    return text.splitlines()[0][:200] if text else type(exc).__name__


def host_problem(host: str) -> str | None:
    """Why ``host`` is not a server address llm-locust can use (one line), or None.

    >>> host_problem("127.0.0.1:8000")
    '--host 127.0.0.1:8000 has no http:// or https:// in front: use --host http://127.0.0.1:8000'
    >>> host_problem("http://127.0.0.1:8000/") is None
    True
    """
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(host)
        parts.port  # noqa: B018  (raises ValueError on a port that is not a number)
    except ValueError as exc:
        return f"--host {host} is not a URL ({exc}); e.g. --host http://127.0.0.1:8000"
    if parts.scheme not in ("http", "https") or not parts.netloc:
        if "://" in host:
            return f"--host {host}: only http:// and https:// servers can be tested"
        return f"--host {host} has no http:// or https:// in front: use --host http://{host}"
    if host.rstrip("/").endswith("/v1"):
        base = host.rstrip("/")
        return f"--host {host} ends with /v1: drop it (llm-locust adds the /v1/... paths), e.g. --host {base[:-3]}"
    return None


def preflight(
    host: str, *, model: str = "", api_key: str = "", timeout_s: float = 10.0, model_required: bool = True
) -> tuple[str | None, str]:
    """Check, before a run starts, that ``host`` answers and serves ``model``.

    Parameters
    ----------
    host : str
        ``--host``.
    model : str
        ``--model``; empty: the run will ask /v1/models for it.
    api_key : str
        Sent as a Bearer token.
    timeout_s : float
        For the GET.
    model_required : bool
        Whether the run needs a model name (False with ``--payload-file``, whose body is sent
        verbatim): then an empty ``model`` with no usable /v1/models answer is an error, since
        every user would fail before sending a request.

    Returns
    -------
    (error, note)
        ``error`` is None when the run can start, else one line saying what is wrong;
        ``note`` is an optional warning (e.g. the server has no ``/v1/models`` but ``--model``
        was given).
    """
    if problem := host_problem(host):
        return problem, ""
    base = host.rstrip("/")
    try:
        models = served_models(base, api_key=api_key, timeout_s=timeout_s)
    except requests.RequestException as exc:
        return f"cannot reach {base}: {connection_problem(exc)}", ""
    except RuntimeError as exc:
        text = str(exc)
        if " 401 " in text or " 403 " in text:
            return (
                f"{base} refused the request: GET /v1/models answered {text.split('answered ')[1].split(' ')[0]} (check --api-key)",
                "",
            )
        if model_required and not model:
            return f"{base}: {text}", ""
        if model:  # the model is given: /v1/models is not needed (the first request tells the rest)
            return None, ""
        return None, f"warning: {text.replace('cannot tell the model: ', '')}"
    if model and model not in models:
        return f"--model {model!r} is not served by {base}; it serves: {', '.join(models)}", ""
    return None, ""
