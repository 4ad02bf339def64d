"""Ask an OpenAI-compatible server which model it serves (and check it can be reached at all)."""

from __future__ import annotations

import socket

import requests


def served_models(base_url: str, *, api_key: str = "", timeout_s: float = 10.0) -> list[str]:
    """The model ids listed by ``GET {base_url}/v1/models``, in the server's order.

    Raises
    ------
    RuntimeError
        The server did not answer 200 with a non-empty ``data`` list (the message says what it sent).
    requests.RequestException
        Connection failures, unchanged.
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    response = requests.get(base_url.rstrip("/") + "/v1/models", headers=headers, timeout=timeout_s)
    try:
        if response.status_code != 200:
            raise ValueError
        models = [str(item["id"]) for item in response.json()["data"]]
        if not models:
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
    seen = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        if isinstance(seen, socket.gaierror):
            return "host name not resolved"
        if isinstance(seen, (requests.Timeout, TimeoutError, socket.timeout)):
            return "timed out"
        seen = seen.__cause__ or seen.__context__ or (seen.args[0] if seen.args and isinstance(seen.args[0], BaseException) else None)
    text = str(exc)
    for marker, reason in (("Connection refused", "connection refused"), ("Name or service not known", "host name not resolved"),
                           ("nodename nor servname", "host name not resolved"), ("timed out", "timed out")):
        if marker in text:
            return reason
    return text.splitlines()[0][:200] if text else type(exc).__name__


def preflight(host: str, *, model: str = "", api_key: str = "", timeout_s: float = 10.0) -> tuple[str | None, str]:
    """Check, before a run starts, that ``host`` answers and serves ``model``.

    Returns
    -------
    (error, note)
        ``error`` is None when the run can start, else one line saying what is wrong;
        ``note`` is an optional warning (e.g. the server has no ``/v1/models``).
    """
    base = host.rstrip("/")
    if base.endswith("/v1"):
        return f"--host {host} ends with /v1: drop it (llm-locust adds the /v1/... paths), e.g. --host {base[:-3]}", ""
    try:
        models = served_models(base, api_key=api_key, timeout_s=timeout_s)
    except requests.RequestException as exc:
        return f"cannot reach {base}: {connection_problem(exc)}", ""
    except RuntimeError as exc:
        text = str(exc)
        if " 401 " in text or " 403 " in text:
            return f"{base} refused the request: GET /v1/models answered {text.split('answered ')[1].split(' ')[0]} (check --api-key)", ""
        return None, f"warning: {text.replace('cannot tell the model: ', '')}"
    if model and model not in models:
        return f"--model {model!r} is not served by {base}; it serves: {', '.join(models)}", ""
    return None, ""
