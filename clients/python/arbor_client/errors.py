"""Errors as typed exceptions: every failed request raises an :class:`ArborError` (or the
subclass for its ``kind``) carrying the server's ``kind``, ``field`` and ``limit``."""

from __future__ import annotations

from typing import Any

import httpx

from .models import LimitBody

__all__ = [
    "ArborError",
    "ValidationError",
    "Unauthorized",
    "NotFound",
    "Conflict",
    "LimitError",
    "Unavailable",
    "StreamError",
]


class ArborError(Exception):
    """A request the server refused or failed.

    ``kind`` is the server's error kind (``validation``, ``not_found``, ``limit``, …),
    ``field`` the request field at fault when there is one, ``limit`` the limit that refused
    it (its ``name``, ``maximum`` and ``observed``), ``status`` the HTTP status.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        status: int,
        field: str | None = None,
        limit: LimitBody | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.status = status
        self.field = field
        self.limit = limit

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(kind={self.kind!r}, status={self.status}, "
            f"field={self.field!r}, message={self.message!r})"
        )


class ValidationError(ArborError):
    """``validation`` (and ``too_large``): the request was malformed; ``field`` names it."""


class Unauthorized(ArborError):
    """``unauthorized``: no token, or one the server does not know."""


class NotFound(ArborError):
    """``not_found``: unknown, deleted, or another tenant's (the same answer for each)."""


class Conflict(ArborError):
    """``conflict``: the state moved on (already decided, already running, …)."""


class LimitError(ArborError):
    """``limit``: a limit refused it; ``limit`` names it with its maximum and what was seen."""


class Unavailable(ArborError):
    """``unavailable``: the server is draining or holds its most connections or streams."""


class StreamError(ArborError):
    """An event stream broke and could not be resumed."""


_KINDS: dict[str, type[ArborError]] = {
    "validation": ValidationError,
    "too_large": ValidationError,
    "unauthorized": Unauthorized,
    "not_found": NotFound,
    "conflict": Conflict,
    "limit": LimitError,
    "unavailable": Unavailable,
}


def raise_for(response: httpx.Response) -> None:
    """Raises the typed error a failed response carries; returns on success."""
    if response.is_success:
        return
    body: Any
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        raise ArborError(
            f"HTTP {response.status_code}: {response.text[:200]}",
            kind="internal" if response.status_code >= 500 else "unknown",
            status=response.status_code,
        )
    kind = str(error.get("kind", "unknown"))
    limit = error.get("limit")
    raise _KINDS.get(kind, ArborError)(
        str(error.get("message", "")),
        kind=kind,
        status=response.status_code,
        field=error.get("field"),
        limit=LimitBody.model_validate(limit) if isinstance(limit, dict) else None,
    )
