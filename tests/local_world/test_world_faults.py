"""Events the distributor world plays: the shared vocabulary on its tables and its own three kinds, each a
real change to the sources, the region map, the Coalesce project or the schedule, deterministic from the
seed. These tests assert what the raw data and the built tables then hold and how the Coalesce run ended;
what dw-dagster detects is tested elsewhere.

The world tests share one seeded world (module-scoped) and may run in any order or on different xdist
workers: each plays the world's next night and leaves it clean (its fault repaired) for the next test.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pandas as pd
import pytest
from frame_digests import frame_digests

from dw_local.scenarios.fault_events import NODE_FAILURE_MARKER
from dw_local.worlds.distributor.events import DISTRIBUTOR_KINDS
from dw_local.worlds.distributor.generator import HERE, ONHAND, ORDER_LINES, DistributorWorld
from dw_local.worlds.distributor.simulation import line_id_range
from dw_local.worlds.night_world import NightResult

RAW = "RAW_EBS.MTL_ONHAND_QUANTITIES_DETAIL"
LINES = "RAW_EBS.OE_ORDER_LINES_ALL"
FCT = "INVENTORY.FCT_INVENTORY_POSITION"
SPEC = DistributorWorld().spec
ORG_IDS = [o.id for o in SPEC.orgs]
Event = dict[str, Any]


def _org(org_id: int, table: str = ONHAND) -> dict[str, int]:
    """The ``where`` of one org's rows of a night-loaded table."""
    return {"ORGANIZATION_ID" if table == ONHAND else "SHIP_FROM_ORG_ID": org_id}


def _kind(cls: type) -> str:
    return cls.model_fields["kind"].annotation.__args__[0]


# ---------------------------------------------------------------- the events, without servers


def test_every_kind_says_what_a_data_engineer_sees_on_this_world():
    sections = re.split(r"^## ", (HERE / "faults.md").read_text(), flags=re.MULTILINE)[1:]
    seen = {s.split("\n", 1)[0].strip("` "): s for s in sections}
    kinds = {_kind(cls) for cls in DISTRIBUTOR_KINDS}
    assert kinds == {
        "duplicate_load", "replication_stalled", "unit_change", "partial_load", "reference_row_deleted",
        "reference_row_remapped", "null_join_key", "column_renamed", "column_dropped", "node_failure",
        "scheduler_skip", "source_not_refreshed", "new_key_unmapped", "new_org_mapped", "steady_growth",
    }  # fmt: skip
    assert set(seen) == kinds
    for kind, text in seen.items():
        assert "A data engineer sees" in text, kind
    assert {_kind(c) for c in DISTRIBUTOR_KINDS if c.benign} == {"new_org_mapped", "steady_growth"}


def test_events_are_checked_against_the_world():
    world = DistributorWorld()
    assert world.parse_event({"kind": "steady_growth", "since_night": 3}).pct == 0.2
    assert world.parse_event(
        {"kind": "reference_row_deleted", "table": "REGION_MAP", "where": _org(7010)}
    ).persists
    assert not world.parse_event({"kind": "duplicate_load", "table": ONHAND}).persists
    node = {"kind": "node_failure", "node": "FCT_INVENTORY_POSITION"}
    assert world.parse_event(node).persists and not world.parse_event({**node, "mode": "test"}).persists
    assert world.parse_event({"kind": "new_key_mapped"}).benign  # the new org mapped
    cases = [
        ({"kind": "scheduler_skip", "where": _org(7010)}, "where"),
        ({"kind": "reference_row_deleted", "table": "REGION_MAP"}, "where"),
        ({"kind": "reference_row_deleted", "table": "REGION_MAP", "where": _org(9999)}, "no row of REGION_MAP"),
        ({"kind": "reference_row_remapped", "table": "REGION_MAP", "where": _org(7010)}, "set"),
        ({"kind": "unit_change", "table": ONHAND, "column": "SUBINVENTORY_CODE"}, "multiplies a number"),
        ({"kind": "unit_change", "table": ONHAND, "column": "TRANSACTION_QUANTITY", "factor": 1}, "factor"),
        ({"kind": "unit_change", "table": ONHAND, "column": "TRANSACTION_QUANTITY", "where": _org(1)}, "never holds 1"),
        ({"kind": "source_not_refreshed"}, "table"),
        ({"kind": "source_not_refreshed", "table": "REGION_MAP"}, "table: REGION_MAP is load: once"),
        ({"kind": "partial_load", "table": ONHAND, "fraction": 1.5}, "fraction"),
        ({"kind": "partial_load", "table": "REGION_MAP"}, "table: partial_load changes the night's new rows"),
        ({"kind": "column_dropped", "table": ORDER_LINES, "column": "LINE_ID"}, "LINE_ID"),
        ({"kind": "column_dropped", "table": "REGION_MAP", "column": "REGION"}, "table: REGION_MAP"),
        ({"kind": "node_failure", "node": "DIM_WAREHOUSE", "mode": "test"}, "node"),
        ({"kind": "steady_growth"}, "since_night"),
        ({"kind": "steady_growth", "since_night": 1, "pct": 0}, "no growth"),
        ({"kind": "new_org_mapped", "org_id": 7010}, "already exists"),
        ({"kind": "duplicate_load", "table": ONHAND, "orgid": 7010}, "orgid"),
        ({"kind": "new_key_unmapped", "value": 7120}, "value"),
        ({"kind": "column_added"}, "column_added"),
        ({"kind": "meteor_strike"}, "meteor_strike"),
    ]  # fmt: skip
    for data, fragment in cases:
        with pytest.raises(ValueError) as err:
            world.parse_event(data)
        assert fragment in str(err.value), (data, str(err.value))


def _faulted(world: DistributorWorld, night: int, *events: Event) -> dict[str, pd.DataFrame]:
    return world.transformed(world.night_tables(night), night, [world.parse_event(e) for e in events])


@pytest.mark.parametrize("factor", [3.7, 0.27, -1])
def test_unit_change_scales_one_org_by_any_factor_in_whole_units(factor):
    world, night = DistributorWorld(), 61
    event = {"kind": "unit_change", "table": ONHAND, "column": "TRANSACTION_QUANTITY", "factor": factor,
             "where": _org(7040)}  # fmt: skip
    clean, changed = world.night_tables(night)[ONHAND], _faulted(world, night, event)[ONHAND]
    org = clean["ORGANIZATION_ID"] == 7040
    expected = (clean.loc[org, "TRANSACTION_QUANTITY"] * factor).round().astype("int64")
    assert (changed.loc[org, "TRANSACTION_QUANTITY"].to_numpy() == expected.to_numpy()).all()
    assert (changed.loc[~org, "TRANSACTION_QUANTITY"] == clean.loc[~org, "TRANSACTION_QUANTITY"]).all()
    measured = changed.loc[org, "TRANSACTION_QUANTITY"].sum() / clean.loc[org, "TRANSACTION_QUANTITY"].sum()
    assert measured == pytest.approx(factor, rel=0.01)


ONHAND_UNITS = {"table": ONHAND, "column": "TRANSACTION_QUANTITY"}
SHIPPED = {"table": ORDER_LINES, "column": "SHIPPED_QUANTITY"}
DATA_EVENTS = [
    {"kind": "duplicate_load", "table": ONHAND, "where": _org(7020)},
    {"kind": "unit_change", **ONHAND_UNITS, "factor": 12, "where": _org(7040)},
    {"kind": "unit_change", **SHIPPED, "factor": 12},
    {"kind": "unit_change", **SHIPPED, "factor": -1, "where": _org(7030, ORDER_LINES)},
    {"kind": "unit_change", **ONHAND_UNITS, "factor": 3.7, "where": _org(7050)},
    {"kind": "partial_load", "table": ONHAND, "fraction": 0.25},
    {"kind": "partial_load", "table": ORDER_LINES, "where": _org(7010, ORDER_LINES)},
    {"kind": "null_join_key", "table": ONHAND, "column": "ORGANIZATION_ID", "fraction": 0.1},
    {"kind": "node_failure", "node": "FCT_INVENTORY_POSITION", "mode": "test"},
    {"kind": "steady_growth", "pct": 0.5, "since_night": 60},
]


@pytest.mark.parametrize("event", DATA_EVENTS, ids=lambda e: e["kind"])
def test_an_event_loads_the_same_data_from_the_same_seed(event: Event):
    night = 61
    first = frame_digests(_faulted(DistributorWorld(), night, event))
    assert first == frame_digests(_faulted(DistributorWorld(), night, event))
    assert first != frame_digests(DistributorWorld().night_tables(night))
    other_seed = DistributorWorld(SPEC.model_copy(update={"seed": 7}))
    if event["kind"] in ("partial_load", "null_join_key", "node_failure"):  # the rows they pick
        clean = frame_digests(other_seed.night_tables(night))
        assert frame_digests(_faulted(other_seed, night, event)) != clean


# ---------------------------------------------------------------- on the seeded world


@pytest.fixture(scope="module")
def env(seeded_world):
    lw = seeded_world
    return {"lw": lw, "world": DistributorWorld(), "coalesce": lw.coalesce_client()}


def _rows(env, sql: str, params: tuple = ()) -> list[tuple]:
    with env["lw"].snowflake.connect() as conn:
        cur = conn.cursor()
        cur.execute(sql, params)
        return cur.fetchall()


def _one(env, sql: str, params: tuple = ()):
    return _rows(env, sql, params)[0][0]


def _next_night(env) -> int:
    return env["world"].last_played_night(env["lw"].snowflake) + 1


def _clean(env, night: int) -> dict[str, pd.DataFrame]:
    """The night's source frames on a clean world (with the org opened earlier, if any)."""
    world = env["world"]
    return world.night_tables(night, world.read_opening(env["lw"].snowflake))


def _play(env, night: int, *faults: Event) -> NightResult:
    return env["world"].play_night(env["lw"].snowflake, env["coalesce"], night, faults)


@contextmanager
def _repaired(env, *faults: Event) -> Iterator[None]:
    """Leaves the world clean for the next test, whatever happens in this one."""
    try:
        yield
    finally:
        for fault in faults:
            env["world"].repair(env["lw"].snowflake, env["coalesce"], fault)


def _by_org(env, table: str, column: str, org_column: str = "ORGANIZATION_ID") -> dict:
    rows = _rows(env, f'SELECT "{org_column}", SUM("{column}") FROM {table} GROUP BY 1')
    return {org: int(units) for org, units in rows}


def _raw_matches(env, frame: pd.DataFrame) -> None:
    """RAW on-hand holds exactly ``frame``: rows, units, ids and orgs."""
    rows, units, ids, orgs = _rows(
        env,
        f'SELECT COUNT(*), SUM("TRANSACTION_QUANTITY"), COUNT(DISTINCT "ONHAND_QUANTITIES_ID"), '
        f'COUNT("ORGANIZATION_ID") FROM {RAW}',
    )[0]
    expected = (
        len(frame), int(frame["TRANSACTION_QUANTITY"].sum()), frame["ONHAND_QUANTITIES_ID"].nunique(),
        int(frame["ORGANIZATION_ID"].notna().sum()),
    )  # fmt: skip
    assert (rows, int(units), ids, orgs) == expected


def _raw_total(env) -> int:
    return int(_one(env, f'SELECT SUM("TRANSACTION_QUANTITY") FROM {RAW}'))


def _fct_total(env) -> int:
    return int(_one(env, f'SELECT SUM("ONHAND_QTY") FROM {FCT}'))


def _map_row(env, org_id: int) -> list[tuple]:
    return _rows(
        env,
        'SELECT "WAREHOUSE_CODE", "WAREHOUSE_NAME", "REGION" FROM REF_PLANNING.REGION_MAP '
        'WHERE "ORGANIZATION_ID" = %s',
        (org_id,),
    )


def _night_lines(env, night: int, what: str = "COUNT(*)", org_id: int | None = None):
    """An aggregate over one business day's order lines in RAW."""
    first, last = line_id_range(night)
    org = "" if org_id is None else f' AND "SHIP_FROM_ORG_ID" = {int(org_id)}'
    sql = f'SELECT {what} FROM {LINES} WHERE "LINE_ID" >= %s AND "LINE_ID" < %s{org}'
    return _one(env, sql, (first, last))


def _failed_nodes(env, run_id: int) -> dict[str, list[str]]:
    """Node name -> the names of its failed queries, for the nodes the run built or tried."""
    results = env["coalesce"].get_run_results(run_id).data
    return {r.name: [q.name for q in r.query_results if not q.success] for r in results}


def _refresh_runs(env) -> list[int]:
    return [r.id for r in env["coalesce"].iter_runs(environment_id=SPEC.environment_id, run_type="refresh")]


@pytest.mark.world
def test_duplicate_load_doubles_the_orgs_units_with_duplicate_ids(env):
    fault = {"kind": "duplicate_load", "table": ONHAND, "where": _org(7020)}
    night = _next_night(env)
    clean = _clean(env, night)[ONHAND]
    org_rows = clean[clean["ORGANIZATION_ID"] == 7020]
    with _repaired(env, fault):
        result = _play(env, night, fault)
        assert result.status == "completed"  # nothing in the project tests RAW's ids
        raw = _by_org(env, RAW, "TRANSACTION_QUANTITY")
        clean_by_org = clean.groupby("ORGANIZATION_ID")["TRANSACTION_QUANTITY"].sum()
        assert raw[7020] == 2 * clean_by_org[7020]
        assert all(raw[o] == clean_by_org[o] for o in clean_by_org.index if o != 7020)
        rows, ids = _rows(env, f'SELECT COUNT(*), COUNT(DISTINCT "ONHAND_QUANTITIES_ID") FROM {RAW}')[0]
        assert (rows, ids) == (len(clean) + len(org_rows), len(clean))
        assert _by_org(env, FCT, "ONHAND_QTY")[7020] == 2 * clean_by_org[7020]
        positions = clean.groupby(["ORGANIZATION_ID", "INVENTORY_ITEM_ID"]).ngroups
        assert _one(env, f"SELECT COUNT(*) FROM {FCT}") == positions
    _raw_matches(env, clean)


@pytest.mark.world
def test_replication_stalled_leaves_the_sources_as_they_were_and_the_job_green(env):
    def sources() -> tuple:
        return _rows(
            env,
            f'SELECT MAX("_QLIK_LOADED_AT"), SUM("TRANSACTION_QUANTITY"), COUNT(*) FROM {RAW}',
        )[0] + (_one(env, f'SELECT MAX("ACTUAL_SHIPMENT_DATE") FROM {LINES}'),)

    night = _next_night(env)
    before, runs_before = sources(), _refresh_runs(env)
    stall = {"kind": "replication_stalled"}
    result = _play(env, night, stall)
    assert result.status == "completed" and result.run_id not in runs_before
    assert sources() == before
    # The fact was rebuilt tonight from yesterday's input.
    assert _one(env, f'SELECT MAX("_QLIK_LOADED_AT") FROM {FCT}') == before[0]
    assert env["world"].last_played_night(env["lw"].snowflake) == night - 1
    assert _night_lines(env, night) == 0

    # Qlik resumes (repair): the stalled night's data arrives, for a rerun.
    env["world"].repair(env["lw"].snowflake, env["coalesce"], stall)
    assert env["world"].last_played_night(env["lw"].snowflake) == night
    _raw_matches(env, _clean(env, night)[ONHAND])
    assert _one(env, f'SELECT MAX("_QLIK_LOADED_AT") FROM {RAW}') > before[0]


@pytest.mark.world
def test_the_night_after_a_stall_catches_up_the_missed_order_lines(env):
    night = _next_night(env)
    assert _play(env, night, {"kind": "replication_stalled"}).status == "completed"
    # No repair: Qlik resumes by itself; the next night brings its data and the stalled night's lines.
    assert _play(env, night + 1).status == "completed"
    assert _night_lines(env, night) == len(_clean(env, night)[ORDER_LINES])
    assert _night_lines(env, night + 1) == len(_clean(env, night + 1)[ORDER_LINES])
    _raw_matches(env, _clean(env, night + 1)[ONHAND])


@pytest.mark.world
def test_unit_change_multiplies_one_orgs_units_by_12_in_raw_and_fct(env):
    fault = {"kind": "unit_change", **ONHAND_UNITS, "factor": 12, "where": _org(7040)}
    night = _next_night(env)
    clean = _clean(env, night)[ONHAND].groupby("ORGANIZATION_ID")["TRANSACTION_QUANTITY"].sum()
    with _repaired(env, fault):
        assert _play(env, night, fault).status == "completed"
        raw, fct = _by_org(env, RAW, "TRANSACTION_QUANTITY"), _by_org(env, FCT, "ONHAND_QTY")
        assert raw[7040] == fct[7040] == 12 * clean[7040]
        assert all(raw[o] == fct[o] == clean[o] for o in clean.index if o != 7040)
    _raw_matches(env, _clean(env, night)[ONHAND])


@pytest.mark.world
def test_unit_change_in_shipped_quantity_stays_in_the_history_until_repaired(env):
    fault = {"kind": "unit_change", **SHIPPED, "factor": 12, "where": _org(7010, ORDER_LINES)}
    night = _next_night(env)
    clean = _clean(env, night)[ORDER_LINES]
    shipped = clean[clean["SHIP_FROM_ORG_ID"] == 7010]["SHIPPED_QUANTITY"].sum()
    day = env["world"].business_date(night)
    demand = (
        'SELECT SUM("SHIPPED_QTY") FROM STAGE.STG_DEMAND WHERE "ORGANIZATION_ID" = 7010 AND "SHIP_DATE" = %s'
    )
    with _repaired(env, fault):
        assert _play(env, night, fault).status == "completed"
        assert _night_lines(env, night, 'SUM("SHIPPED_QUANTITY")', 7010) == 12 * shipped
        assert _one(env, demand, (day,)) == 12 * shipped
    assert _night_lines(env, night, 'SUM("SHIPPED_QUANTITY")', 7010) == shipped


@pytest.mark.world
def test_partial_load_drops_a_fraction_of_the_rows(env):
    fault = {"kind": "partial_load", "table": ONHAND, "fraction": 0.25}
    night = _next_night(env)
    clean = _clean(env, night)[ONHAND]
    with _repaired(env, fault):
        assert _play(env, night, fault).status == "completed"
        assert _one(env, f"SELECT COUNT(*) FROM {RAW}") == len(clean) - round(0.25 * len(clean))
        positions = clean.groupby(["ORGANIZATION_ID", "INVENTORY_ITEM_ID"]).ngroups
        fct_rows = _one(env, f"SELECT COUNT(*) FROM {FCT}")
        assert 0.7 * positions < fct_rows < 0.85 * positions
        assert _fct_total(env) == _raw_total(env)
    _raw_matches(env, clean)


@pytest.mark.world
def test_reference_row_deleted_drops_the_org_from_the_fact_until_repaired(env):
    fault = {"kind": "reference_row_deleted", "table": "REGION_MAP", "where": _org(7030)}
    night = _next_night(env)
    warehouses = _one(env, "SELECT COUNT(*) FROM REF_PLANNING.REGION_MAP")
    with _repaired(env, fault):
        assert _play(env, night, fault).status == "completed"
        assert _one(env, "SELECT COUNT(*) FROM INVENTORY.DIM_WAREHOUSE") == warehouses - 1
        raw, fct = _by_org(env, RAW, "TRANSACTION_QUANTITY"), _by_org(env, FCT, "ONHAND_QTY")
        assert 7030 in raw and 7030 not in fct
        assert sum(raw.values()) - sum(fct.values()) == raw[7030]
    assert _map_row(env, 7030) == [("DC3", "Columbus", "Midwest")]
    # Repaired: the next night builds every org again.
    assert _play(env, night + 1).status == "completed"
    assert _by_org(env, FCT, "ONHAND_QTY") == _by_org(env, RAW, "TRANSACTION_QUANTITY")


@pytest.mark.world
def test_reference_row_remapped_moves_the_orgs_units_to_another_warehouse(env):
    dc6 = {"WAREHOUSE_CODE": "DC6", "WAREHOUSE_NAME": "Kansas City", "REGION": "Central"}
    fault = {"kind": "reference_row_remapped", "table": "REGION_MAP", "where": _org(7050), "set": dc6}
    night = _next_night(env)
    with _repaired(env, fault):
        assert _play(env, night, fault).status == "completed"
        remapped = f'SELECT DISTINCT "WAREHOUSE_CODE", "REGION" FROM {FCT} WHERE "ORGANIZATION_ID" = 7050'
        assert _rows(env, remapped) == [("DC6", "Central")]
        assert _fct_total(env) == _raw_total(env)
        updated = _one(env, 'SELECT "UPDATED_AT" FROM REF_PLANNING.REGION_MAP WHERE "ORGANIZATION_ID" = 7050')
        assert updated.date() == env["world"].business_date(night)
    assert _map_row(env, 7050) == [("DC5", "Reno", "West")]


@pytest.mark.world
def test_null_join_key_nulls_a_fraction_of_the_orgs_and_the_fact_loses_their_units(env):
    fault = {"kind": "null_join_key", "table": ONHAND, "column": "ORGANIZATION_ID", "fraction": 0.1}
    night = _next_night(env)
    clean = _clean(env, night)[ONHAND]
    with _repaired(env, fault):
        assert _play(env, night, fault).status == "completed"
        nulls, null_units = _rows(
            env, f'SELECT COUNT(*), SUM("TRANSACTION_QUANTITY") FROM {RAW} WHERE "ORGANIZATION_ID" IS NULL'
        )[0]
        assert nulls == round(0.1 * len(clean))
        assert _raw_total(env) == clean["TRANSACTION_QUANTITY"].sum()
        assert _fct_total(env) == clean["TRANSACTION_QUANTITY"].sum() - null_units
        assert _one(env, 'SELECT COUNT(*) FROM STAGE.STG_ONHAND WHERE "ORGANIZATION_ID" IS NULL') > 0
    _raw_matches(env, clean)
    nullable = _one(
        env,
        "SELECT IS_NULLABLE FROM DW_PROD.INFORMATION_SCHEMA.COLUMNS WHERE TABLE_SCHEMA = 'RAW_EBS' "
        "AND TABLE_NAME = 'MTL_ONHAND_QUANTITIES_DETAIL' AND COLUMN_NAME = 'ORGANIZATION_ID'",
    )
    assert nullable == "NO"


def _raw_columns(env, table: str) -> list[str]:
    return [
        r[0]
        for r in _rows(
            env,
            "SELECT COLUMN_NAME FROM DW_PROD.INFORMATION_SCHEMA.COLUMNS WHERE TABLE_SCHEMA = 'RAW_EBS' "
            "AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (table,),
        )
    ]


@pytest.mark.world
def test_column_renamed_fails_the_node_reading_it_until_repaired(env):
    fault = {"kind": "column_renamed", **ONHAND_UNITS, "new_name": "TRANSACTION_QUANTITY_NEW"}
    night = _next_night(env)
    declared = _raw_columns(env, ONHAND)
    with _repaired(env, fault):
        result = _play(env, night, fault)
        assert result.status == "failed"
        assert "TRANSACTION_QUANTITY_NEW" in _raw_columns(env, ONHAND)
        # The night's rows arrived under the new name.
        units = _one(env, f'SELECT SUM("TRANSACTION_QUANTITY_NEW") FROM {RAW}')
        assert units == _clean(env, night)[ONHAND]["TRANSACTION_QUANTITY"].sum()
        failed = _failed_nodes(env, result.run_id)
        assert failed["STG_ONHAND"] == ["Insert Data"]
        assert FCT.split(".")[1] not in failed  # downstream: not built
    assert _raw_columns(env, ONHAND) == declared
    assert _play(env, night + 1).status == "completed"


@pytest.mark.world
def test_column_dropped_in_order_lines_fails_demand_and_repair_reloads_the_table(env):
    fault = {"kind": "column_dropped", **SHIPPED}
    night = _next_night(env)
    declared = _raw_columns(env, ORDER_LINES)
    lines_before = _one(env, f"SELECT COUNT(*) FROM {LINES}")
    with _repaired(env, fault):
        result = _play(env, night, fault)
        assert result.status == "failed"
        assert "SHIPPED_QUANTITY" not in _raw_columns(env, ORDER_LINES)
        failed = _failed_nodes(env, result.run_id)
        assert failed["STG_DEMAND"] == ["Insert Data"]
        assert failed["STG_ONHAND"] == []  # the other branch builds
    assert _raw_columns(env, ORDER_LINES) == declared
    expected_tonight = len(_clean(env, night)[ORDER_LINES])
    assert _one(env, f"SELECT COUNT(*) FROM {LINES}") == lines_before + expected_tonight
    assert _one(env, f'SELECT COUNT(*) FROM {LINES} WHERE "SHIPPED_QUANTITY" IS NULL') == 0
    assert _play(env, night + 1).status == "completed"


@pytest.mark.world
def test_node_failure_deploys_a_broken_node_until_repaired(env):
    fault = {"kind": "node_failure", "node": "FCT_INVENTORY_POSITION"}  # mode sql
    night = _next_night(env)
    coalesce = env["coalesce"]
    with _repaired(env, fault):
        result = _play(env, night, fault)
        assert result.status == "failed"
        failed = _failed_nodes(env, result.run_id)
        assert failed["FCT_INVENTORY_POSITION"] == ["Insert Data"]
        assert "MART_DAYS_OF_SUPPLY" not in failed and failed["STG_ONHAND"] == []
        run = coalesce.get_run(result.run_id)
        assert "FCT_INVENTORY_POSITION" in (run.run_failure_reason or "")
        deploys = list(coalesce.iter_runs(environment_id=SPEC.environment_id, run_type="deploy"))
        assert deploys and max(d.id for d in deploys) < result.run_id
    nodes = coalesce.list_nodes(SPEC.environment_id, detail=True)
    node = next(n for n in nodes if n.name == "FCT_INVENTORY_POSITION")
    assert NODE_FAILURE_MARKER not in node.model_dump_json()
    assert _play(env, night + 1).status == "completed"


@pytest.mark.world
def test_node_failure_by_a_data_condition_fails_the_facts_node_test(env):
    fault = {"kind": "node_failure", "node": "FCT_INVENTORY_POSITION", "mode": "test"}
    night = _next_night(env)
    with _repaired(env, fault):
        result = _play(env, night, fault)
        assert result.status == "failed"
        failed = _failed_nodes(env, result.run_id)
        assert failed["FCT_INVENTORY_POSITION"] == ["NO_NEGATIVE_ONHAND"]
        assert _one(env, f'SELECT COUNT(*) FROM {FCT} WHERE "ONHAND_QTY" < 0') == 5
        assert "MART_DAYS_OF_SUPPLY" not in failed
    assert _one(env, f'SELECT COUNT(*) FROM {RAW} WHERE "TRANSACTION_QUANTITY" < 0') == 0


@pytest.mark.world
def test_scheduler_skip_applies_the_data_but_starts_no_run(env):
    night = _next_night(env)
    runs_before = _refresh_runs(env)
    built_before = _one(env, f'SELECT MAX("_QLIK_LOADED_AT") FROM {FCT}')
    result = _play(env, night, {"kind": "scheduler_skip"})
    assert (result.status, result.run_id) == ("skipped", None)
    assert _refresh_runs(env) == runs_before
    assert env["world"].last_played_night(env["lw"].snowflake) == night  # EBS moved on
    _raw_matches(env, _clean(env, night)[ONHAND])
    assert _one(env, f'SELECT MAX("_QLIK_LOADED_AT") FROM {FCT}') == built_before  # the fact did not


@pytest.mark.world
def test_steady_growth_grows_raw_and_the_fact_together(env):
    night = _next_night(env)
    growth = {"kind": "steady_growth", "pct": 1.0, "since_night": night}
    world = env["world"]
    for n in (night, night + 1):
        opening = world.read_opening(env["lw"].snowflake)
        expected = world.transformed(world.night_tables(n, opening), n, [world.parse_event(growth)])[ONHAND]
        clean = world.night_tables(n, opening)[ONHAND]
        assert _play(env, n, growth).status == "completed"
        _raw_matches(env, expected)
        assert _one(env, f'SELECT SUM("ONHAND_QTY") FROM {FCT}') == expected["TRANSACTION_QUANTITY"].sum()
        ratio = expected["TRANSACTION_QUANTITY"].sum() / clean["TRANSACTION_QUANTITY"].sum()
        assert ratio == pytest.approx(1.01 ** (n - night + 1), rel=1e-3)


@pytest.mark.world
def test_new_org_mapped_the_same_day_keeps_raw_and_the_fact_in_line(env):
    """Benign; it opens the world's one new org for good, so other tests account for it (read_opening)."""
    night = _next_night(env)
    if env["world"].read_opening(env["lw"].snowflake) is not None:
        pytest.skip("an org is already open on this world")
    warehouses = _one(env, "SELECT COUNT(*) FROM INVENTORY.DIM_WAREHOUSE")
    reorder = _one(env, "SELECT COUNT(*) FROM MART.MART_REORDER_CANDIDATES")
    new_org = SPEC.reference_night.new_org
    assert _play(env, night, {"kind": "new_org_mapped"}).status == "completed"
    raw, fct = _by_org(env, RAW, "TRANSACTION_QUANTITY"), _by_org(env, FCT, "ONHAND_QTY")
    assert raw == fct and raw[new_org.id] == SPEC.reference_night.transfer_units
    assert _one(env, f'SELECT COUNT(*) FROM {FCT} WHERE "ORGANIZATION_ID" = %s', (new_org.id,)) == 1260
    assert _one(env, "SELECT COUNT(*) FROM INVENTORY.DIM_WAREHOUSE") == warehouses + 1
    assert _one(env, "SELECT COUNT(*) FROM MART.MART_REORDER_CANDIDATES") == reorder
    # The org stays open on the next night, still mapped.
    assert _play(env, night + 1).status == "completed"
    assert _by_org(env, FCT, "ONHAND_QTY")[new_org.id] == SPEC.reference_night.transfer_units


@pytest.mark.world
def test_source_not_refreshed_keeps_yesterdays_onhand_while_order_lines_move_on(env):
    fault = {"kind": "source_not_refreshed", "table": ONHAND}
    night = _next_night(env)
    before = _rows(env, f'SELECT COUNT(*), SUM("TRANSACTION_QUANTITY"), MAX("_QLIK_LOADED_AT") FROM {RAW}')[0]
    with _repaired(env, fault):
        assert _play(env, night, fault).status == "completed"
        held = _rows(env, f'SELECT COUNT(*), SUM("TRANSACTION_QUANTITY"), MAX("_QLIK_LOADED_AT") FROM {RAW}')
        assert held[0] == before
        assert _night_lines(env, night) == len(_clean(env, night)[ORDER_LINES])  # order lines arrived
    _raw_matches(env, _clean(env, night)[ONHAND])


@pytest.mark.world
def test_source_not_refreshed_order_lines_arrive_with_the_next_night(env):
    night = _next_night(env)
    assert _play(env, night, {"kind": "source_not_refreshed", "table": ORDER_LINES}).status == "completed"
    assert _night_lines(env, night) == 0
    _raw_matches(env, _clean(env, night)[ONHAND])  # on-hand was applied
    assert _play(env, night + 1).status == "completed"
    assert _night_lines(env, night) == len(_clean(env, night)[ORDER_LINES])


@pytest.mark.world
def test_a_sign_flip_on_one_org_fails_the_facts_node_test(env):
    fault = {"kind": "unit_change", **ONHAND_UNITS, "factor": -1, "where": _org(7060)}
    night = _next_night(env)
    with _repaired(env, fault):
        result = _play(env, night, fault)
        assert result.status == "failed"
        assert _failed_nodes(env, result.run_id)["FCT_INVENTORY_POSITION"] == ["NO_NEGATIVE_ONHAND"]
        raw = _by_org(env, RAW, "TRANSACTION_QUANTITY")
        assert raw[7060] < 0 and all(units > 0 for org, units in raw.items() if org != 7060)
    _raw_matches(env, _clean(env, night)[ONHAND])


@pytest.mark.world
def test_a_skipped_night_fails_the_freshness_policies_of_every_built_table(env):
    from dw_local.daemon import LocalDaemon

    daemon = LocalDaemon(env["lw"])
    built = {"inventory/fct_inventory_position", "mart/mart_days_of_supply", "stage/stg_onhand"}
    night = _next_night(env)
    clean = _play(env, night)
    outcome = daemon.tick(at=clean.watched_at)
    assert built <= set(outcome.freshness) and outcome.stale() == []
    skipped = _play(env, night + 1, {"kind": "scheduler_skip"})
    assert built <= set(daemon.tick(at=skipped.watched_at).stale())
    assert daemon.tick(at=_play(env, night + 2).watched_at).stale() == []
