"""Hand-written configuration files: strict pydantic models, and errors that name the file, the field and
what was expected."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import pydantic
import yaml


class FileModel(pydantic.BaseModel):
    """Base of the models of hand-written files: a misspelt key is a mistake to report, not to ignore."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)


class DwConfigError(ValueError):
    """A configuration or state file is missing, unreadable or invalid."""


QUOTE_LIMIT = 300
"""How much of a bad value an error quotes: enough to recognise it, never a whole file."""


def quote(value: Any, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)``, cut to ``limit`` characters with the length of what was left out."""
    shown = repr(value)
    if len(shown) <= limit:
        return shown
    return f"{shown[:limit]}... ({len(shown) - limit:,} more characters)"


def describe_validation_error(source: str | Path, err: pydantic.ValidationError) -> str:
    """One line per problem: ``<file>: <field.path>: <what was expected> (got <value>)``."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "<root>"
        got = e.get("input")
        shown = quote(got) if not isinstance(got, dict | list) else type(got).__name__
        lines.append(f"{source}: {loc}: {e['msg']} (got {shown})")
    return "\n".join(lines)


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml's parser when PyYAML has it
    """YAML's safe loader, except that a key given twice in one mapping is an error: PyYAML keeps the last
    value silently, so a second ``sales-ops:`` block would replace the first team without a word."""

    source: str = "<yaml>"

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor` brings defaults that the mapping's own keys may override
            key = self.construct_object(key_node, deep=deep)  # type: ignore[arg-type]
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:
                continue  # an unhashable key: construct_mapping below reports it
            if first is not None:
                raise DwConfigError(
                    f"{self.source}: line {line}: duplicate key {key!r} (first given on line {first}); "
                    "each key may appear once in a mapping"
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load_yaml_text(text: str, source: str | Path) -> Any:
    """Parses hand-written YAML, refusing duplicate keys; errors name ``source`` and the line."""
    loader = _StrictLoader(text)
    loader.source = str(source)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as e:
        raise DwConfigError(f"{source}: not valid YAML: {e}") from e
    finally:
        loader.dispose()


def load_yaml_documents(text: str, source: str | Path) -> list[Any]:
    """Every document of a hand-written YAML stream (``---`` separates them), refusing duplicate keys."""
    loader = _StrictLoader(text)
    loader.source = str(source)
    documents = []
    try:
        while loader.check_data():
            documents.append(loader.get_data())
    except yaml.YAMLError as e:
        raise DwConfigError(f"{source}: not valid YAML: {e}") from e
    finally:
        loader.dispose()
    return documents


def validate_timezone(value: str) -> str:
    """An IANA time zone name that zoneinfo knows."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ValueError(f"expected an IANA time zone such as 'Europe/Paris', got {value!r}") from e
    return value


def validate_cron(value: str) -> str:
    """A five-field cron (or an ``@daily``-style alias) that croniter can schedule."""
    from croniter import croniter

    text = value.strip()
    fields = text.split()
    if not (text.startswith("@") or len(fields) == 5) or not croniter.is_valid(text):
        raise ValueError(
            f"expected a five-field cron 'minute hour day-of-month month day-of-week' such as '0 9 * * 1-5', got {value!r}"
        )
    return text


_BIND = re.compile(r"%\((\w+)\)s|%s")


def validate_read_only_sql(text: str) -> str:
    """Exactly one statement that only reads: a ``SELECT`` (``WITH`` and set operations included), as
    sqlglot parses it in Snowflake's dialect. ``{{ ref('LOCATION', 'NODE') }}`` and the connector's binds
    (``%(name)s``, ``%s``, ``%%``) may appear. Returns the statement without its trailing ``;``.

    Configured SQL runs with the code location's role: a second statement or a write hidden in a hand-kept
    file would run with it, every night."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError

    from dw_dagster.coalesce.sql import resolve_refs

    # Placeholders sqlglot reads, standing for what is substituted before the statement runs.
    parseable = resolve_refs(text, lambda location, name: f'"{location}"."{name}"')
    parseable = _BIND.sub("NULL", parseable).replace("%%", "%")
    try:
        statements = [s for s in sqlglot.parse(parseable, read="snowflake") if s is not None]
    except ParseError as e:
        first = e.errors[0] if e.errors else {}
        where = f" at line {first['line']}, column {first['col']}" if "line" in first else ""
        raise ValueError(
            f"expected one read-only SELECT statement; not valid Snowflake SQL{where}: "
            f"{first.get('description') or e}"
        ) from None
    if len(statements) != 1:
        raise ValueError(f"expected one read-only SELECT statement, got {len(statements)} statements")
    (statement,) = statements
    if not isinstance(statement, exp.Query):
        raise ValueError(f"expected one read-only SELECT statement, got {statement.key.upper()}")
    for node in statement.walk():
        if isinstance(node, exp.DML | exp.DDL | exp.Command):
            raise ValueError(f"expected one read-only SELECT statement; it contains {node.key.upper()}")
        if isinstance(node, exp.Select) and node.args.get("into"):
            raise ValueError("expected one read-only SELECT statement; SELECT ... INTO creates a table")
        if isinstance(node, exp.Anonymous) and str(node.name).upper().startswith("SYSTEM$"):
            # Snowflake's system functions act (cancel queries, abort sessions), not just read.
            raise ValueError(f"expected one read-only SELECT statement; it calls {node.name}")
    return re.sub(r"[\s;]+$", "", text.strip())


ModelT = TypeVar("ModelT", bound=pydantic.BaseModel)


def load_yaml_model(path: str | Path, model: type[ModelT], what: str, env_var: str) -> ModelT:
    """Reads a hand-written YAML file into ``model``; every failure names the file (and the field)."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError as e:
        raise DwConfigError(f"{path}: {what} not found (set {env_var})") from e
    raw = load_yaml_text(text, path)
    try:
        return model.model_validate(raw)
    except pydantic.ValidationError as e:
        raise DwConfigError(describe_validation_error(path, e)) from e


def resolve_env_vars(value: Any) -> Any:
    """A copy of a resource or config with every ``EnvVar`` replaced by the variable's value, or ``value``
    itself when it holds none (as in a run or a tick, where Dagster resolved them: a resource's copy costs a
    config schema inference).

    Dagster resolves EnvVars when it initializes resources for a run; a resource used directly (by a
    command, a store, a sensor builder) needs it done here. This creates no Dagster instance.
    """
    import dagster as dg

    if isinstance(value, dg.EnvVar):
        resolved = value.get_value()
        if resolved is None:
            raise DwConfigError(f"{value.env_var_name}: not set")
        return resolved
    if isinstance(value, dg.Config | dg.ConfigurableResource):
        given = {(f.alias or name): getattr(value, name) for name, f in type(value).model_fields.items()}
        resolved = {k: resolve_env_vars(v) for k, v in given.items()}
        return value if _same(resolved.values(), given.values()) else type(value)(**resolved)
    if isinstance(value, dict):
        resolved = {k: resolve_env_vars(v) for k, v in value.items()}
        return value if _same(resolved.values(), value.values()) else resolved
    if isinstance(value, list | tuple):
        items = [resolve_env_vars(v) for v in value]
        return value if _same(items, value) else type(value)(items)
    return value


def _same(resolved: Iterable[Any], given: Iterable[Any]) -> bool:
    return all(r is g for r, g in zip(resolved, given, strict=True))
