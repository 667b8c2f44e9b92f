"""Typed metadata sets for the ``coalesce/*`` keys: what the translator writes on each asset spec and what
the run sensor writes on each event. Read them back with ``CoalesceMetadataSet.extract(spec.metadata)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Self

import dagster as dg

from dw_dagster.coalesce.dagster_internals import NamespacedMetadataSet


class _CoalesceNamespace(NamespacedMetadataSet):
    """The ``coalesce/*`` keys, read back as Dagster's ``extract`` does, field by field: Dagster's walks every
    entry of the mapping and rebuilds the model's field table for each ``coalesce/*`` key, 11 times a spec,
    which at 10,000 nodes was a tenth of the code location's load. No legacy keys, so nothing else differs
    (``tests/coalesce/test_metadata.py`` compares the two)."""

    @classmethod
    def namespace(cls) -> str:
        return "coalesce"

    @classmethod
    def extract(cls, values: Mapping[str, Any]) -> Self:
        kwargs: dict[str, Any] = {}
        for field in cls.model_fields:
            value = cls.read(values, field)
            if value is not None:
                kwargs[field] = value
        return cls(**kwargs)

    @classmethod
    def read(cls, values: Mapping[str, Any], field: str) -> Any:
        """One field of ``extract(values)``, without building the set (whose model checks every field's
        annotation on each instance: a reader of one or two fields of 10,000 specs pays for all)."""
        value = values.get(f"coalesce/{field}")
        return None if value is None else cls._coerce(field, value)

    @classmethod
    def entries(cls, **fields: Any) -> dict[str, Any]:
        """The metadata entries that ``{**cls(**fields)}`` gives, the fields that are not None in the set's
        order, without building the set: the translator writes one a node, and values of the declared
        types pass the model's validation unchanged."""
        unknown = fields.keys() - cls.model_fields.keys()
        if unknown:
            raise TypeError(f"{cls.__name__} has no fields named {sorted(unknown)}")
        return {f"coalesce/{f}": v for f in cls.model_fields if (v := fields.get(f)) is not None}

    @classmethod
    def _coerce(cls, field: str, value: object) -> object:
        # As Dagster's _extract_value: a wrapped value whose field takes the inner one (a str in TextMetadataValue).
        if isinstance(value, dg.MetadataValue):
            accepted = cls._get_accepted_types_for_field(field)
            if type(value) not in accepted and type(value.value) in accepted:
                return value.value
        return value


class CoalesceMetadataSet(_CoalesceNamespace):
    """What an asset spec says about the Coalesce node it is.

    Args:
        node_id (Optional[str]): The node's id in its environment.
        node_name (Optional[str]): The node's name (``{{ ref('LOCATION', 'NAME') }}`` names it with
            ``location``).
        location (Optional[str]): The node's storage location.
        node_type (Optional[str]): ``Source``, ``Stage``, ``Fact``, ... or a custom type.
        environment (Optional[JsonMetadataValue]): ``{"id", "name"}`` of the environment.
        selector (Optional[str]): A Coalesce selector that picks exactly this node.
        jobs (Optional[JsonMetadataValue]): ``[{"id", "name"}]`` of the jobs whose selectors build it.
        materialization (Optional[str]): ``table`` or ``view``.
        join (Optional[MarkdownMetadataValue]): The node's join condition(s), as SQL.
        node_tests (Optional[JsonMetadataValue]): The names of its node tests.
        column_sources (Optional[MarkdownMetadataValue]): Each column and the columns it is built from,
            as a table the open-source UI renders (``dagster/column_lineage`` carries the same, typed).
        business_key (Optional[JsonMetadataValue]): The columns the node declares its business key
            (``isBusinessKey``), in the node's order; absent on a node that tracks changes
            (``isChangeTracking``: a row per version of a key, so the key repeats by design).
        column_transforms (Optional[JsonMetadataValue]): What the diagnosis reads of the columns'
            transforms, by column, only where one says something (``coalesce/transforms.py``):
            ``aggregate``, the aggregate a column applies at its top level when it is not a sum
            (``COUNT(DISTINCT)``, ``COUNT(*)``, ``MAX``, ...), and ``defaulted``, the ``[table alias,
            column]`` it reads only through a COALESCE/IFNULL/NVL default. Absent where none does.
    """

    node_id: str | None = None
    node_name: str | None = None
    location: str | None = None
    node_type: str | None = None
    environment: dg.JsonMetadataValue | None = None
    selector: str | None = None
    jobs: dg.JsonMetadataValue | None = None
    materialization: str | None = None
    join: dg.MarkdownMetadataValue | None = None
    node_tests: dg.JsonMetadataValue | None = None
    column_sources: dg.MarkdownMetadataValue | None = None
    business_key: dg.JsonMetadataValue | None = None
    column_transforms: dg.JsonMetadataValue | None = None

    @property
    def environment_id(self) -> str | None:
        env = self.environment.data if self.environment is not None else None
        return str(env["id"]) if isinstance(env, Mapping) and "id" in env else None

    @property
    def environment_name(self) -> str | None:
        env = self.environment.data if self.environment is not None else None
        return str(env["name"]) if isinstance(env, Mapping) and env.get("name") else None

    @property
    def job_refs(self) -> list[tuple[str, str]]:
        """``(job id, job name)`` of the jobs that build the node."""
        jobs = self.jobs.data if self.jobs is not None else None
        if not isinstance(jobs, Sequence):  # none, or not the list the translator writes
            return []
        return [(str(j["id"]), str(j["name"])) for j in jobs]

    @classmethod
    def key_columns(cls, values: Mapping[str, Any]) -> list[str]:
        """The business key's columns on a spec's metadata (none when it declares none)."""
        key = cls.read(values, "business_key")
        columns = getattr(key, "data", key)
        if not isinstance(columns, Sequence) or isinstance(columns, str):
            return []
        return [str(c) for c in columns]


class CoalesceRunMetadataSet(_CoalesceNamespace):
    """What a materialization or observation reported from a Coalesce run says about that run.

    The run's own fields are on every event; rows, times and queries on a node built; status, error and
    the failing query on a node that failed or was cut short.
    """

    run_id: int | None = None
    run_link: dg.UrlMetadataValue | None = None
    environment_id: str | None = None
    job_id: str | None = None
    job_name: str | None = None
    node_id: str | None = None
    rows_inserted: int | None = None
    rows_updated: int | None = None
    rows_deleted: int | None = None
    query_start: dg.TimestampMetadataValue | None = None
    query_end: dg.TimestampMetadataValue | None = None
    duration_seconds: float | None = None
    queries: dg.JsonMetadataValue | None = None
    status: str | None = None
    run_status: str | None = None
    failed_query: str | None = None
    error: str | None = None
    error_detail: dg.TextMetadataValue | None = None
    ended_at: dg.TimestampMetadataValue | None = None


def is_coalesce_spec(spec: dg.AssetSpec) -> bool:
    """Whether ``spec`` is a Coalesce node's, without reading its metadata back: Dagster's ``extract`` walks
    every metadata entry of the spec (columns, lineage), most of a 10,000-node load when done for a filter."""
    return f"{CoalesceMetadataSet.namespace()}/node_id" in spec.metadata


def coalesce_specs(specs: Sequence[dg.AssetSpec]) -> list[tuple[dg.AssetSpec, CoalesceMetadataSet]]:
    """The specs that are Coalesce nodes, each with its metadata read back."""
    return [(spec, CoalesceMetadataSet.extract(spec.metadata)) for spec in specs if is_coalesce_spec(spec)]
