"""What differs by Provider rather than by wire format: keys, request ids, error bodies and the model list.

A route's flavour, which the server tells from the path, says whose these are: Anthropic's on ``/v1/messages``,
OpenRouter's under ``/api/v1`` (its own prefix, see ``openrouter_base_url``), OpenAI's elsewhere. A request no
format takes (``GET /v1/models``, an unknown path) is Anthropic's when it sends ``anthropic-version``, a header
only Anthropic's clients send. OpenRouter's errors are ``{"error": {"code": <status>, "message"}}``, OpenAI's
and Anthropic's each their own. With an API key set, a call without it gets the Provider's 401.
"""

from __future__ import annotations

from typing import Any

from amber_pipeline.models.provider_double.calls import Flavour, ProviderError, new_id

_OPENAI_ERROR_TYPE = {"rate_limit": "requests", "server": "server_error", "overloaded": "server_error"}
_ANTHROPIC_ERROR_TYPE = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "not_found": "not_found_error",
    "rate_limit": "rate_limit_error",
    "server": "api_error",
    "overloaded": "overloaded_error",
}


def check_auth(flavour: Flavour, headers: dict[str, str], key: str | None) -> None:
    """Refuse a call as the Provider would: without the key (when one is set), or, at Anthropic, its version."""
    if flavour == "anthropic":
        if key is not None and headers.get("x-api-key") != key:
            message = "invalid x-api-key" if "x-api-key" in headers else "x-api-key header is required"
            raise ProviderError(401, message, "authentication")
        if "anthropic-version" not in headers:
            raise ProviderError(400, "anthropic-version: header is required")
        return
    if key is None or headers.get("authorization") == f"Bearer {key}":
        return
    if flavour == "openrouter":
        raise ProviderError(401, "No auth credentials found", "authentication")
    if "authorization" not in headers:
        message = (
            "You didn't provide an API key. You need to provide your API key in an "
            "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
        )
        raise ProviderError(401, message, "authentication")
    given = headers["authorization"].removeprefix("Bearer ")
    shown = given[:3] + "*" * max(0, len(given) - 7) + given[-4:] if len(given) > 7 else "****"
    raise ProviderError(401, f"Incorrect API key provided: {shown}.", "authentication", "invalid_api_key")


def unknown_model(flavour: Flavour, requested: str) -> ProviderError:
    if flavour == "anthropic":
        return ProviderError(404, f"model: {requested}", "not_found")
    message = f"The model `{requested}` does not exist or you do not have access to it."
    return ProviderError(404, message, "not_found", "model_not_found")


def request_id(flavour: Flavour) -> dict[str, str]:
    """A fresh request id in the Provider's header."""
    return {"request-id" if flavour == "anthropic" else "x-request-id": new_id("req_")}


def error_body(flavour: Flavour, e: ProviderError) -> dict[str, Any]:
    if flavour == "anthropic":
        error = {"type": _ANTHROPIC_ERROR_TYPE[e.kind], "message": str(e)}
        return {"type": "error", "error": error, "request_id": new_id("req_")}
    if flavour == "openrouter":
        body: dict[str, Any] = {"code": e.status, "message": str(e)}
        if e.upstream:
            body["metadata"] = {"provider_name": e.upstream, "raw": str(e)}
        return {"error": body}
    kind = _OPENAI_ERROR_TYPE.get(e.kind, "invalid_request_error")
    return {"error": {"message": str(e), "type": kind, "param": e.param, "code": e.code}}


def model_list(flavour: Flavour, names: list[str]) -> dict[str, Any]:
    """The body of ``GET /v1/models``: the replay models, in the Provider's list shape."""
    if flavour == "anthropic":
        data = [
            {"type": "model", "id": m, "display_name": m, "created_at": "1970-01-01T00:00:00Z"}
            for m in names
        ]
        first, last = (names[0], names[-1]) if names else (None, None)
        return {"data": data, "has_more": False, "first_id": first, "last_id": last}
    owner = {"object": "model", "created": 0, "owned_by": "amber-replay"}
    return {"object": "list", "data": [{"id": m, **owner} for m in names]}
