"""Snowflake SQL text the whole product writes: quoted identifiers and table references. Every identifier
that comes from metadata (a node's table, a column, the ops schema) is quoted here: it keeps its case and
cannot inject SQL."""

from __future__ import annotations


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
