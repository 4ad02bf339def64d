"""Ask an OpenAI-compatible server which model it serves."""

from __future__ import annotations

import requests


def first_served_model(base_url: str, *, api_key: str = "", timeout_s: float = 10.0) -> str:
    """The first model id listed by ``GET {base_url}/v1/models``.

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
        return str(response.json()["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise RuntimeError(
            f"cannot tell the model: GET /v1/models answered {response.status_code} {response.text[:200]!r}; pass --model"
        ) from None
