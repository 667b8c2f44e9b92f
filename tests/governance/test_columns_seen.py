"""The columns last seen, kept in the Dagster instance: read back as written, and an unreadable record is an
error naming its key (never taken for an empty one, which would flag nothing or everything)."""

from __future__ import annotations

import dagster as dg
import pytest

from dw_dagster.config import DwConfigError
from dw_dagster.governance.columns import last_seen, loaded_columns, record_seen


def test_the_record_survives_a_new_instance_on_the_same_storage(tmp_path):
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        assert last_seen(instance, "2") is None
        record_seen(instance, "2", {"n1": ["A", "B"]})
    with dg.instance_for_test(temp_dir=str(tmp_path)) as again:
        assert last_seen(again, "2") == {"n1": ["A", "B"]}
        assert last_seen(again, "5") is None  # per environment


def test_an_unreadable_record_names_its_key():
    with dg.instance_for_test() as instance:
        instance.run_storage.set_cursor_values({"dw/governance/columns/2": '{"n1": "A"}'})
        with pytest.raises(DwConfigError, match=r"'dw/governance/columns/2': unreadable record"):
            last_seen(instance, "2")


def test_the_loaded_state_is_the_column_schema_of_the_environment_s_specs():
    def md(env: str, node: str, *columns: str) -> dict:
        return {
            "coalesce/node_id": node,
            "coalesce/environment": dg.MetadataValue.json({"id": env}),
            "dagster/column_schema": dg.MetadataValue.table_schema(
                dg.TableSchema(columns=[dg.TableColumn(c) for c in columns])
            ),
        }

    metadata = {dg.AssetKey("a"): md("2", "n1", "X", "Y"), dg.AssetKey("b"): md("5", "n2", "Z")}
    assert loaded_columns(metadata, "2") == {"n1": ["X", "Y"]}
