"""Faults the distributor world plays: each a real change to the sources, the region map, the Coalesce
project or the schedule, deterministic from the seed. These tests assert what the raw data and the built
tables then hold and how the Coalesce run ended; what dw-dagster detects is tested elsewhere.

The world tests share one seeded world (module-scoped) and may run in any order or on different xdist
workers: each plays the world's next night and leaves it clean (its fault repaired) for the next test.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Iterator
from contextlib import contextmanager

import pandas as pd
import pydantic
import pytest

from dw_local.scenarios.fault_events import NODE_FAILURE_MARKER
from dw_local.worlds.distributor.faults import KINDS, Fault
from dw_local.worlds.distributor.generator import ONHAND, ORDER_LINES, DistributorWorld
from dw_local.worlds.distributor.simulation import line_id_range
from dw_local.worlds.night_world import NightResult

RAW = "RAW_EBS.MTL_ONHAND_QUANTITIES_DETAIL"
LINES = "RAW_EBS.OE_ORDER_LINES_ALL"
FCT = "INVENTORY.FCT_INVENTORY_POSITION"
SPEC = DistributorWorld().spec
ORG_IDS = [o.id for o in SPEC.orgs]


# ---------------------------------------------------------------- the fault model, without servers


def test_every_kind_says_what_a_data_engineer_sees():
    assert set(KINDS) >= {
        "duplicate_load", "replication_stalled", "unit_change", "partial_load", "reference_row_deleted",
        "reference_row_remapped", "null_join_key", "column_renamed", "column_dropped", "node_failure",
        "scheduler_skip", "source_not_refreshed", "new_org_mapped", "steady_growth",
    }  # fmt: skip
    for kind, cls in KINDS.items():
        doc = inspect.getdoc(cls) or ""
        assert "Parameters:" in doc and "A data engineer sees" in doc, kind
    assert {k for k, c in KINDS.items() if c.benign} == {"new_org_mapped", "steady_growth"}


def test_fault_parameters_are_validated_and_defaulted():
    x12 = Fault(kind="unit_change")
    assert (x12.factor, x12.column) == (12, "TRANSACTION_QUANTITY")
    assert Fault(kind="column_renamed", column="LAST_UPDATE_DATE").new_name == "LAST_UPDATE_DATE_NEW"
    assert Fault(kind="reference_row_deleted", org_id=7010).persists
    assert not Fault(kind="duplicate_load").persists
    assert Fault(kind="node_failure").persists and not Fault(kind="node_failure", mode="test").persists
    # Round trip, as a scenario file would carry it.
    fault = Fault(kind="partial_load", fraction=0.2, org_id=7020)
    assert Fault.model_validate_json(fault.model_dump_json()) == fault
    cases = [
        ({"kind": "scheduler_skip", "org_id": 7010}, "org_id: not a parameter of scheduler_skip"),
        ({"kind": "reference_row_deleted"}, "org_id: reference_row_deleted needs it"),
        ({"kind": "reference_row_remapped", "org_id": 7010}, "to_org_id"),
        ({"kind": "unit_change", "column": "ONHAND_QUANTITIES_ID"}, "column"),
        ({"kind": "unit_change", "factor": 0}, "factor: expected a factor other than 0 and 1"),
        ({"kind": "unit_change", "factor": 1}, "factor: expected a factor other than 0 and 1"),
        ({"kind": "source_not_refreshed"}, "table: source_not_refreshed needs it"),
        ({"kind": "source_not_refreshed", "table": "REGION_MAP"}, "table: 'REGION_MAP'"),
        ({"kind": "partial_load", "fraction": 1.5}, "fraction"),
        ({"kind": "partial_load", "table": "REGION_MAP"}, "table"),
        ({"kind": "column_dropped", "table": ORDER_LINES, "column": "LINE_ID"}, "LINE_ID"),
        ({"kind": "node_failure", "node": "DIM_WAREHOUSE", "mode": "test"}, "node"),
        ({"kind": "steady_growth"}, "since_night"),
        ({"kind": "duplicate_load", "orgid": 7010}, "orgid"),
        ({"kind": "meteor_strike"}, "kind"),
    ]
    for data, fragment in cases:
        with pytest.raises(pydantic.ValidationError) as err:
            Fault.model_validate(data)
        assert fragment in str(err.value), (data, str(err.value))


@pytest.mark.parametrize("factor", [3.7, 0.27, -1])
def test_unit_change_scales_one_org_by_any_factor_in_whole_units(factor):
    world, night = DistributorWorld(), 61
    fault = Fault(kind="unit_change", org_id=7040, factor=factor)
    clean, changed = world.night_tables(night)[ONHAND], world.faulted_night_tables(night, [fault])[ONHAND]
    org = clean["ORGANIZATION_ID"] == 7040
    expected = (clean.loc[org, "TRANSACTION_QUANTITY"] * factor).round().astype("int64")
    assert (changed.loc[org, "TRANSACTION_QUANTITY"].to_numpy() == expected.to_numpy()).all()
    assert (changed.loc[~org, "TRANSACTION_QUANTITY"] == clean.loc[~org, "TRANSACTION_QUANTITY"]).all()
    measured = changed.loc[org, "TRANSACTION_QUANTITY"].sum() / clean.loc[org, "TRANSACTION_QUANTITY"].sum()
    assert measured == pytest.approx(factor, rel=0.01)


def _fingerprint(tables: dict[str, pd.DataFrame]) -> dict[str, str]:
    return {k: hashlib.sha256(v.to_csv(index=False).encode()).hexdigest() for k, v in tables.items()}


DATA_FAULTS = [
    Fault(kind="duplicate_load", org_id=7020),
    Fault(kind="unit_change", org_id=7040),
    Fault(kind="unit_change", column="SHIPPED_QUANTITY"),
    Fault(kind="unit_change", column="SHIPPED_QUANTITY", factor=-1, org_id=7030),
    Fault(kind="unit_change", factor=3.7, org_id=7050),
    Fault(kind="partial_load", fraction=0.25),
    Fault(kind="partial_load", table=ORDER_LINES, org_id=7010),
    Fault(kind="null_join_key", fraction=0.1),
    Fault(kind="node_failure", mode="test"),
    Fault(kind="steady_growth", pct=0.5, since_night=60),
]


@pytest.mark.parametrize("fault", DATA_FAULTS, ids=lambda f: f.kind)
def test_a_fault_loads_the_same_data_from_the_same_seed(fault: Fault):
    night = 61
    first = _fingerprint(DistributorWorld().faulted_night_tables(night, [fault]))
    assert first == _fingerprint(DistributorWorld().faulted_night_tables(night, [fault]))
    assert first != _fingerprint(DistributorWorld().night_tables(night))
    other_seed = DistributorWorld(SPEC.model_copy(update={"seed": 7}))
    if fault.kind in ("partial_load", "null_join_key", "node_failure"):  # the rows they pick
        clean = _fingerprint(other_seed.night_tables(night))
        assert _fingerprint(other_seed.faulted_night_tables(night, [fault])) != clean


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


def _play(env, night: int, *faults: Fault) -> NightResult:
    return env["world"].play_night(env["lw"].snowflake, env["coalesce"], night, faults)


@contextmanager
def _repaired(env, *faults: Fault) -> Iterator[None]:
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
    fault = Fault(kind="duplicate_load", org_id=7020)
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
    stall = Fault(kind="replication_stalled")
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
    assert _play(env, night, Fault(kind="replication_stalled")).status == "completed"
    # No repair: Qlik resumes by itself; the next night brings its data and the stalled night's lines.
    assert _play(env, night + 1).status == "completed"
    assert _night_lines(env, night) == len(_clean(env, night)[ORDER_LINES])
    assert _night_lines(env, night + 1) == len(_clean(env, night + 1)[ORDER_LINES])
    _raw_matches(env, _clean(env, night + 1)[ONHAND])


@pytest.mark.world
def test_unit_change_multiplies_one_orgs_units_by_12_in_raw_and_fct(env):
    fault = Fault(kind="unit_change", org_id=7040, factor=12)
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
    fault = Fault(kind="unit_change", column="SHIPPED_QUANTITY", org_id=7010)
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
    fault = Fault(kind="partial_load", fraction=0.25)
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
    fault = Fault(kind="reference_row_deleted", org_id=7030)
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
    fault = Fault(kind="reference_row_remapped", org_id=7050, to_org_id=7060)
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
    fault = Fault(kind="null_join_key", fraction=0.1)
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
    fault = Fault(kind="column_renamed")  # TRANSACTION_QUANTITY -> TRANSACTION_QUANTITY_NEW
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
    fault = Fault(kind="column_dropped", table=ORDER_LINES, column="SHIPPED_QUANTITY")
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
    fault = Fault(kind="node_failure")  # FCT_INVENTORY_POSITION, mode sql
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
    fault = Fault(kind="node_failure", mode="test")
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
    result = _play(env, night, Fault(kind="scheduler_skip"))
    assert (result.status, result.run_id) == ("skipped", None)
    assert _refresh_runs(env) == runs_before
    assert env["world"].last_played_night(env["lw"].snowflake) == night  # EBS moved on
    _raw_matches(env, _clean(env, night)[ONHAND])
    assert _one(env, f'SELECT MAX("_QLIK_LOADED_AT") FROM {FCT}') == built_before  # the fact did not


@pytest.mark.world
def test_steady_growth_grows_raw_and_the_fact_together(env):
    night = _next_night(env)
    growth = Fault(kind="steady_growth", pct=1.0, since_night=night)
    world = env["world"]
    for n in (night, night + 1):
        opening = world.read_opening(env["lw"].snowflake)
        expected = world.faulted_night_tables(n, [growth], opening)[ONHAND]
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
    assert _play(env, night, Fault(kind="new_org_mapped")).status == "completed"
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
    fault = Fault(kind="source_not_refreshed", table=ONHAND)
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
    assert _play(env, night, Fault(kind="source_not_refreshed", table=ORDER_LINES)).status == "completed"
    assert _night_lines(env, night) == 0
    _raw_matches(env, _clean(env, night)[ONHAND])  # on-hand was applied
    assert _play(env, night + 1).status == "completed"
    assert _night_lines(env, night) == len(_clean(env, night)[ORDER_LINES])


@pytest.mark.world
def test_a_sign_flip_on_one_org_fails_the_facts_node_test(env):
    fault = Fault(kind="unit_change", org_id=7060, factor=-1)
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
    skipped = _play(env, night + 1, Fault(kind="scheduler_skip"))
    assert built <= set(daemon.tick(at=skipped.watched_at).stale())
    assert daemon.tick(at=_play(env, night + 2).watched_at).stale() == []
