"""Each resource class's config schema, inferred once a process in the local daemon.

Dagster infers a ``ConfigurableResource``'s config schema from its pydantic fields every time one is made,
and it makes them again for every run it executes and every sensor tick that has resources (the warehouse
resource's 21 fields, its nested connection resource, Slack, Coalesce): in a seeded history of 60 nights,
played in one process by the local daemon, that inference was 5% of the process's time. The schema depends
only on the class and the fields left out (``infer_schema_from_config_class``), so the local daemon keeps
each one. A deployment's processes run one run each (a run worker) or evaluate a tick now and then (a code
server): the product does not need this, and it is installed only where the local daemon runs.

Dagster has no setting for this: the module replaces the name ``resource.py`` calls, behind the release
check, in this one module. ``install`` is idempotent and changes nothing a resource holds: each instance
still gets its own curried config schema (``_curry_config_schema`` builds a new one from the shared field).
"""

from __future__ import annotations

import functools

from dw_dagster.coalesce.dagster_version import require_verified_dagster

require_verified_dagster("the local daemon's resource config schemas (dw_local.resource_schemas)")

# Below the check, so that another release fails above with a message rather than here with an ImportError.
# ruff: noqa: E402
from dagster._config.pythonic_config import resource as _resource
from dagster._config.pythonic_config.config import infer_schema_from_config_class

_INFER = infer_schema_from_config_class


@functools.cache
def _inferred(model_cls: type, fields_to_omit: frozenset[str]):
    return _INFER(model_cls, fields_to_omit=set(fields_to_omit))


def _infer_once(model_cls, description=None, fields_to_omit=None, default=None):
    if description is not None or default is not None:
        return _INFER(model_cls, description=description, fields_to_omit=fields_to_omit, default=default)
    return _inferred(model_cls, frozenset(fields_to_omit or ()))


def install() -> None:
    """From now on, this process's resources share each class's inferred config schema."""
    if _resource.infer_schema_from_config_class is _INFER:
        _resource.infer_schema_from_config_class = _infer_once
