"""Fault injection: what a client meets in production and rarely locally.

- HTTP faults: the next N requests under a path prefix fail with 429 or a 5xx, in Coalesce's error body;
  a 429 always carries ``Retry-After`` (1 s unless given), a 5xx only when given. Setting a fault replaces the previous one; a count of 0 clears it. The
  simulator's own ``/_sim/`` endpoints are never faulted, so a test can always clean up.
- A slow warehouse: every query of a run waits first, so a run spans many polls and can be canceled
  while it runs.
- Slow and failing node-detail pages: a page of ``GET .../nodes?detail=true`` takes ``secondsPerNode`` for
  each node on it, and a page asking for more than ``failAbove`` nodes fails. On large projects Coalesce's
  own Catalog extractor needs a 4-minute timeout for a page of 200 detailed nodes and divides the page size
  by ten on a timeout, "raising this value might end up in remote server disconnection" (castor-extractor
  0.26.131, ``castor_extractor/transformation/coalesce/client/client.py`` ``COALESCE_TIMEOUT_SECONDS``,
  ``utils/client/api/smart_pagination.py``); its safe mode also tolerates 500s on these pages.
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


class NodePageFault(BaseModel):
    """Body of ``POST /_sim/nodepages``: what the next detailed node pages meet."""

    model_config = ConfigDict(extra="forbid")

    secondsPerNode: float = Field(default=0.0, ge=0, le=5)
    failAbove: int | None = Field(default=None, ge=0)
    failStatus: Literal[500, 502, 503, 504] = 504
    count: int | None = Field(default=None, ge=1, description="Pages it applies to; unset: until cleared.")


class Faults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._http: HttpFault | None = None
        self._remaining = 0
        self._node_pages: NodePageFault | None = None
        self._node_pages_remaining: int | None = None
        self.query_delay = 0.0

    def set_node_pages(self, fault: NodePageFault) -> None:
        with self._lock:
            self._node_pages, self._node_pages_remaining = fault, fault.count

    def take_node_page(self, limit: int, nodes: int) -> tuple[float, int | None]:
        """The delay of a detailed node page asking for ``limit`` nodes and holding ``nodes``, and the status
        it fails with (None: it answers)."""
        with self._lock:
            fault = self._node_pages
            if fault is None:
                return 0.0, None
            if self._node_pages_remaining is not None:
                self._node_pages_remaining -= 1
                if self._node_pages_remaining <= 0:
                    self._node_pages = None
        failed = fault.failAbove is not None and limit > fault.failAbove
        return fault.secondsPerNode * nodes, fault.failStatus if failed else None

    def set_http(self, fault: HttpFault) -> None:
        with self._lock:
            self._http = fault if fault.count else None
            self._remaining = fault.count

    def clear(self) -> None:
        with self._lock:
            self._http, self._remaining = None, 0
            self._node_pages, self._node_pages_remaining = None, None
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
            pages = self._node_pages.model_dump() if self._node_pages else None
        return {"http": http, "queryDelaySeconds": self.query_delay, "nodePages": pages}


def error_body(status: int) -> dict[str, Any]:
    """Coalesce's error body for an injected failure."""
    return {
        "error": {
            "errorString": _ERROR_STRINGS[status],
            "errorDetail": "Injected by the local Coalesce simulator (POST /_sim/faults or /_sim/nodepages).",
        }
    }


def fault_response(fault: HttpFault) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Status, Coalesce error body and headers of a faulted request."""
    retry_after = fault.retryAfter
    if retry_after is None and fault.status == 429:
        retry_after = 1  # a rate limit always says when to come back
    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
    return fault.status, error_body(fault.status), headers
