"""Hand-written configuration files: strict pydantic models, and errors that name the file, the field and
what was expected."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import pydantic
import yaml


class FileModel(pydantic.BaseModel):
    """Base of the models of hand-written files: a misspelt key is a mistake to report, not to ignore."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)


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


ModelT = TypeVar("ModelT", bound=pydantic.BaseModel)


def load_yaml_model(path: str | Path, model: type[ModelT], what: str, env_var: str) -> ModelT:
    """Reads a hand-written YAML file into ``model``; every failure names the file (and the field)."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError as e:
        raise DwConfigError(f"{path}: {what} not found (set {env_var})") from e
    except yaml.YAMLError as e:
        raise DwConfigError(f"{path}: not valid YAML: {e}") from e
    try:
        return model.model_validate(raw)
    except pydantic.ValidationError as e:
        raise DwConfigError(describe_validation_error(path, e)) from e


def resolve_env_vars(value: Any) -> Any:
    """A copy of a resource or config with every ``EnvVar`` replaced by the variable's value.

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
        fields = type(value).model_fields
        return type(value)(
            **{(f.alias or name): resolve_env_vars(getattr(value, name)) for name, f in fields.items()}
        )
    if isinstance(value, dict):
        return {k: resolve_env_vars(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(resolve_env_vars(v) for v in value)
    return value
