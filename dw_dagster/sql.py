"""Snowflake SQL text the whole product writes: quoted identifiers, table references and placeholders. Every
identifier that comes from metadata (a node's table, a column, the ops schema) is quoted here: it keeps its
case and cannot inject SQL. Every value is bound server-side (``?``, ``warehouse/connections.py``): never
written into the text."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


def quote_identifier(name: str) -> str:
    """A Snowflake quoted identifier: names from metadata keep their case and cannot inject SQL."""
    return '"' + name.replace('"', '""') + '"'


def table_parts(table_name: object) -> tuple[str, str, str] | None:
    """``("DB", "SCHEMA", "NAME")`` from a ``DB.SCHEMA.NAME`` table name (``dagster/table_name``)."""
    parts = str(table_name).split(".") if table_name else []
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 else None


def table_reference(database: str, schema: str, name: str) -> str:
    """The fully quoted ``"DATABASE"."SCHEMA"."NAME"``."""
    return ".".join(quote_identifier(part) for part in (database, schema, name))


def placeholders(count: int) -> str:
    """``?, ?, ?``: one placeholder per value (an IN list, a VALUES row); a list bound to one ``?`` would be
    an array binding."""
    if count < 1:
        raise ValueError("expected at least one value to bind")
    return ", ".join(["?"] * count)


_PYFORMAT = re.compile(r"%(\((\w+)\)s|%)?")


def positional(text: str, values: Mapping[str, Any]) -> tuple[str, tuple[Any, ...]]:
    """A statement a person wrote with named placeholders (``%(name)s``, and ``%%`` for a literal ``%``, the
    connector's pyformat, as configuration files take it) made positional for server-side binding: each
    placeholder a ``?``, its value in that order. A bare ``%`` or an unknown name is a ValueError naming it."""
    bound: list[Any] = []

    def replace(m: re.Match[str]) -> str:
        if m[1] is None:
            raise ValueError(f"a % at {m.start()} that is neither %(name)s nor %% (write a literal % as %%)")
        if m[1] == "%":
            return "%"
        if m[2] not in values:
            raise ValueError(
                f"%({m[2]})s: no such value to bind; expected one of {', '.join(sorted(values))}"
            )
        bound.append(values[m[2]])
        return "?"

    return _PYFORMAT.sub(replace, text), tuple(bound)


_TIME_TYPE = re.compile(r"^(TIMESTAMP\w*|DATETIME|DATE)\b", re.IGNORECASE)


def is_time_type(type_name: str | None) -> bool:
    """Whether a Snowflake column type holds a date or a time (``TIMESTAMP_NTZ(9)``, ``DATE``)."""
    return bool(_TIME_TYPE.match(type_name or ""))
