"""How the simulator's listings page, as strictly as Coalesce documents it.

- ``startingFrom`` needs ``orderBy``: "When using startingFrom, you must also include the orderBy parameter"
  (https://docs.coalesce.io/docs/api/query-parameters); Coalesce's Transform MCP server describes
  ``orderBy`` as "required with startingFrom" (jessemarshall/coalesce-transform-mcp
  ``src/coalesce/types.ts`` ``PaginationParams``). A request without it is refused, never defaulted.
- ``next`` is an opaque cursor (the query-parameters page shows a base64 token), not the last item's id:
  a client must pass it back as it came. Each cursor names its listing, its order and its direction; one
  handed to another listing, or with another ``orderBy``/``orderByDirection``, is refused.
- The runs listing also takes a run id or a time as ``startingFrom`` (Coalesce's OpenAPI v6.2,
  ``GET /api/v1/runs``: "The starting run ID, runStartTime, or runEndTime (exclusive)").
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from typing import TypeVar

from dw_local.coalesce_sim.simulator import ApiError

T = TypeVar("T")

ORDER_REQUIRED = (
    "startingFrom: orderBy is required with startingFrom (give the orderBy the previous page was listed by)"
)


def encode_cursor(listing: str, order_by: str, descending: bool, key: str) -> str:
    raw = json.dumps({"l": listing, "o": order_by, "d": "desc" if descending else "asc", "k": key})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(token: str, listing: str, order_by: str, descending: bool) -> str:
    """The key a cursor of this listing, order and direction points after; 400 for anything else."""
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        fields = (raw["l"], raw["o"], raw["d"], raw["k"])
    except (binascii.Error, ValueError, UnicodeDecodeError, KeyError, TypeError):
        raise ApiError(400, f"startingFrom: {token!r} is not a cursor this API gave") from None
    if fields[0] != listing:
        raise ApiError(400, f"startingFrom: the cursor belongs to another listing ({fields[0]})")
    if fields[1:3] != (order_by, "desc" if descending else "asc"):
        raise ApiError(
            400,
            f"startingFrom: the cursor was given for orderBy={fields[1]} orderByDirection={fields[2]}; "
            "keep the orderBy and orderByDirection of the page it came from",
        )
    return str(fields[3])


def page(
    listing: str,
    items: Sequence[T],
    key: Callable[[T], str],
    limit: int,
    order_by: str,
    descending: bool,
    starting_from: str | None,
) -> tuple[list[T], str | None]:
    """One page of an in-memory list already sorted by ``order_by``; ``next`` is an opaque cursor."""
    start = 0
    if starting_from is not None:
        after = decode_cursor(starting_from, listing, order_by, descending)
        keys = [key(item) for item in items]
        if after not in keys:
            raise ApiError(
                400, f"startingFrom: {starting_from!r} points after an item this listing no longer has"
            )
        start = keys.index(after) + 1
    chunk = list(items[start : start + limit])
    more = start + limit < len(items)
    return chunk, (encode_cursor(listing, order_by, descending, key(chunk[-1])) if more and chunk else None)
