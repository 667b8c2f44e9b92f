"""Fault injection: what a client meets in production and rarely locally.

- HTTP faults: the next N requests under a path prefix fail with 429 or a 5xx, in Coalesce's error body;
  a 429 always carries ``Retry-After`` (1 s unless given), a 5xx only when given. Setting a fault replaces the previous one; a count of 0 clears it. The
  simulator's own ``/_sim/`` endpoints are never faulted, so a test can always clean up.
- A slow warehouse: every query of a run waits first, so a run spans many polls and can be canceled
  while it runs.
"""

from __future__ import annotations

import threading
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

CONTROL_PREFIX = "/_sim/"

_ERROR_STRINGS = {
    429: "429: Too many requests, please retry later.",
    500: "500: Internal server error.",
    502: "502: Bad gateway.",
    503: "503: Service unavailable, please retry later.",
    504: "504: Gateway timeout.",
}


class HttpFault(BaseModel):
    """Body of ``POST /_sim/faults``."""

    model_config = ConfigDict(extra="forbid")

    status: Literal[429, 500, 502, 503, 504]
    count: int = Field(ge=0)
    retryAfter: float | None = Field(default=None, ge=0)
    pathPrefix: str = "/"


class WarehouseFault(BaseModel):
    """Body of ``POST /_sim/warehouse``."""

    model_config = ConfigDict(extra="forbid")

    queryDelaySeconds: float = Field(ge=0, le=60)


class Faults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._http: HttpFault | None = None
        self._remaining = 0
        self.query_delay = 0.0

    def set_http(self, fault: HttpFault) -> None:
        with self._lock:
            self._http = fault if fault.count else None
            self._remaining = fault.count

    def clear(self) -> None:
        with self._lock:
            self._http, self._remaining = None, 0
        self.query_delay = 0.0

    def take(self, path: str) -> HttpFault | None:
        """The fault this request meets, if any; each one counts against the fault's ``count``."""
        if path.startswith(CONTROL_PREFIX):
            return None
        with self._lock:
            fault = self._http
            if fault is None or not path.startswith(fault.pathPrefix):
                return None
            self._remaining -= 1
            if self._remaining <= 0:
                self._http = None
            return fault

    def describe(self) -> dict[str, Any]:
        with self._lock:
            http = {**self._http.model_dump(), "remaining": self._remaining} if self._http else None
        return {"http": http, "queryDelaySeconds": self.query_delay}


def fault_response(fault: HttpFault) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Status, Coalesce error body and headers of a faulted request."""
    body = {
        "error": {
            "errorString": _ERROR_STRINGS[fault.status],
            "errorDetail": "Injected by the local Coalesce simulator (POST /_sim/faults).",
        }
    }
    retry_after = fault.retryAfter
    if retry_after is None and fault.status == 429:
        retry_after = 1  # a rate limit always says when to come back
    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
    return fault.status, body, headers
