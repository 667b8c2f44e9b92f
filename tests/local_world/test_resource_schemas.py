"""The local daemon's shared resource config schemas: inferred once per class, and each resource still
configured with its own values (dw_local.resource_schemas)."""

from __future__ import annotations

import dagster as dg
from dagster._config.pythonic_config import resource as dagster_resource

from dw_dagster.warehouse.snowflake_config import SnowflakeConnectionResource
from dw_local import resource_schemas


class _Inner(dg.ConfigurableResource):
    region: str = "eu"


class _Outer(dg.ConfigurableResource):
    inner: _Inner
    name: str
    retries: int = 3


def test_a_class_schema_is_inferred_once_and_each_resource_keeps_its_own_values():
    resource_schemas.install()
    resource_schemas.install()  # idempotent: the wrapper is not wrapped again
    assert dagster_resource.infer_schema_from_config_class is resource_schemas._infer_once

    a = SnowflakeConnectionResource(account="acct-a", user="u", password="p")
    b = SnowflakeConnectionResource(account="acct-b", user="v", password="q", role="R")
    assert a._schema is b._schema  # one inference for the class
    assert a._config_schema is not b._config_schema  # each curried with its own values

    # What Dagster resolves for each resource at run time: its own values, nested resources included.
    one = _Outer(inner=_Inner(region="us"), name="one")
    two = _Outer(inner=_Inner(), name="two", retries=5)
    with dg.build_resources({"one": one, "two": two}) as built:
        assert (built.one.name, built.one.retries, built.one.inner.region) == ("one", 3, "us")
        assert (built.two.name, built.two.retries, built.two.inner.region) == ("two", 5, "eu")

    # A field left out (a nested resource given as a resource) is part of the key, not a shared schema.
    partial = resource_schemas._infer_once(_Outer, fields_to_omit={"inner"})
    full = resource_schemas._infer_once(_Outer)
    assert set(partial.config_type.fields) == {"name", "retries"}
    assert set(full.config_type.fields) == {"name", "retries"}  # nested resources are never config fields
    described = resource_schemas._infer_once(_Outer, description="told")
    assert described.description == "told" and full.description != "told"
