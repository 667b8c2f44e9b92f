"""A problem of a project file or of an edited node: what it is in, the field and what is wrong; and a
pydantic error location written as such a field (``columns[2].sources[0]``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    subject: str  # "node STAGE.STG_ONHAND", "environment 2", "job 1", "schedules[0]"
    field: str  # "columns[2].sources[0]"
    message: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.field}: {self.message}"


def format_loc(loc: Iterable[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
