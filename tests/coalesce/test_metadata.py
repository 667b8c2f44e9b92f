"""The ``coalesce/*`` metadata sets read back exactly what Dagster's own ``NamespacedMetadataSet.extract``
reads, from a spec's metadata and from an event's, wrapped values included (their ``extract`` is a faster
field-by-field read: ``dw_dagster/coalesce/metadata.py``)."""

from __future__ import annotations

import dagster as dg
from dagster._core.definitions.metadata.metadata_set import NamespacedMetadataSet

from dw_dagster.coalesce.metadata import CoalesceMetadataSet, CoalesceRunMetadataSet


def dagsters_extract(cls, values):
    return NamespacedMetadataSet.extract.__func__(cls, values)


def test_a_specs_coalesce_metadata_reads_back_as_dagster_reads_it() -> None:
    written = CoalesceMetadataSet(
        node_id="n-1",
        node_name="ORDERS",
        location="STG",
        node_type="Stage",
        environment=dg.MetadataValue.json({"id": "2", "name": "PROD"}),
        selector="{location: STG name: ORDERS}",
        jobs=dg.MetadataValue.json([{"id": "7", "name": "nightly"}]),
        materialization="table",
        join=dg.MetadataValue.md("```sql\nFROM x\n```"),
    )
    spec = dg.AssetSpec(
        "orders",
        metadata={
            "dagster/table_name": "DW.STG.ORDERS",
            **written,
            "coalesce/unknown_field": "ignored",
            "coalesce/nested/key": "ignored",
            "other/node_id": "not ours",
        },
    )
    for values in (dict(spec.metadata), {**spec.metadata, "coalesce/node_id": dg.MetadataValue.text("n-1")}):
        ours = CoalesceMetadataSet.extract(values)
        assert ours == dagsters_extract(CoalesceMetadataSet, values) == written
        assert ours.environment_id == "2" and ours.job_refs == [("7", "nightly")]
    assert (
        CoalesceMetadataSet.extract({}) == dagsters_extract(CoalesceMetadataSet, {}) == CoalesceMetadataSet()
    )


def test_a_run_events_coalesce_metadata_reads_back_as_dagster_reads_it() -> None:
    values = {
        "coalesce/run_id": dg.MetadataValue.int(41),
        "coalesce/run_link": dg.MetadataValue.url("https://app.coalescesoftware.io/runs/41"),
        "coalesce/rows_inserted": 120,
        "coalesce/duration_seconds": dg.MetadataValue.float(2.5),
        "coalesce/query_end": dg.MetadataValue.timestamp(1_764_000_000.0),
        "coalesce/status": dg.MetadataValue.text("Succeeded"),
        "coalesce/error": None,
        "dagster/row_count": 120,
    }
    ours = CoalesceRunMetadataSet.extract(values)
    assert ours == dagsters_extract(CoalesceRunMetadataSet, values)
    assert (ours.run_id, ours.status, ours.rows_inserted, ours.duration_seconds) == (
        41,
        "Succeeded",
        120,
        2.5,
    )
