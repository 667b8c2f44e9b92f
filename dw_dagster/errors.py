"""Errors that name the file, the field and what was expected."""

from __future__ import annotations

from pathlib import Path

import pydantic


class DwConfigError(ValueError):
    """A configuration or state file is missing, unreadable or invalid."""


def describe_validation_error(source: str | Path, err: pydantic.ValidationError) -> str:
    """One line per problem: ``<file>: <field.path>: <what was expected> (got <value>)``."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "<root>"
        got = e.get("input")
        shown = repr(got) if not isinstance(got, dict | list) else type(got).__name__
        lines.append(f"{source}: {loc}: {e['msg']} (got {shown})")
    return "\n".join(lines)
