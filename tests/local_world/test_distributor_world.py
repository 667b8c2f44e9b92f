"""The distributor world: deterministic data, 60 ordinary nights, and the reference night's numbers as
the real Coalesce job (through the simulator, over sockets) computes them in the local Snowflake."""

from __future__ import annotations

import itertools
import re
from datetime import timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import yaml
from frame_digests import frame_digests

from dw_dagster.config import DwConfigError
from dw_local.coalesce_sim.project import load_project
from dw_local.worlds.distributor.generator import WORLD_FILE, DistributorWorld
from dw_local.worlds.distributor.model import load_spec

HISTORY = 60
REF = load_spec(WORLD_FILE).reference_night

RAW_ONHAND = 'SELECT SUM("TRANSACTION_QUANTITY") FROM RAW_EBS.MTL_ONHAND_QUANTITIES_DETAIL'
FCT_ONHAND = 'SELECT SUM("ONHAND_QTY") FROM INVENTORY.FCT_INVENTORY_POSITION'
REORDER = "SELECT COUNT(*) FROM MART.MART_REORDER_CANDIDATES"


def _world_data(world: DistributorWorld) -> dict[str, str]:
    data = {f"install.{k}": v for k, v in frame_digests(world.install_frames()).items()}
    data.update({f"night0.{k}": v for k, v in frame_digests(world.night_tables(0)).items()})
    ref = world.reference_opening(HISTORY + 1)
    data.update({f"ref.{k}": v for k, v in frame_digests(world.night_tables(HISTORY + 1, ref)).items()})
    return data


def test_same_seed_gives_identical_data():
    first, second = _world_data(DistributorWorld()), _world_data(DistributorWorld())
    assert first == second
    other = _world_data(DistributorWorld(load_spec(WORLD_FILE).model_copy(update={"seed": 7})))
    key = "night0.MTL_ONHAND_QUANTITIES_DETAIL"
    assert other[key] != first[key]


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda d: d.update(sku_count="many"), "sku_count"),
        (lambda d: d["reference_night"].update(from_org=9999), "reference_night.from_org"),
        (lambda d: d["demand"].update(weekend_factr=0.6), "demand.weekend_factr"),
        (lambda d: d.pop("orgs"), "orgs"),
        (lambda d: d["reorder"].update(threshold_days=3), "reorder.low_days_of_supply"),
        (lambda d: d.update(timezone="America/Dalas"), "timezone"),
    ],
)
def test_broken_world_file_names_the_field(tmp_path: Path, edit, field):
    data = yaml.safe_load(WORLD_FILE.read_text())
    edit(data)
    path = tmp_path / "world.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(DwConfigError) as err:
        DistributorWorld.from_file(path)
    assert str(path) in str(err.value)
    assert field in str(err.value)


def test_reorder_threshold_is_the_projects():
    project = yaml.safe_load(DistributorWorld().project_file.read_text())
    node = next(n for n in project["nodes"] if n["name"] == "MART_REORDER_CANDIDATES")
    threshold = float(re.search(r'"DAYS_OF_SUPPLY"\s*<\s*([\d.]+)', node["join"]).group(1))
    assert threshold == load_spec(WORLD_FILE).reorder.threshold_days


def test_every_built_column_has_lineage():
    # load_project checks that every source and ref names a real node and column.
    project = load_project(DistributorWorld().project_file)
    for node in project.file.nodes:
        if not node.is_source:
            assert all(col.sources for col in node.columns), node.name


# ---------------------------------------------------------------- over the local servers


def _scalar(cur, sql: str):
    cur.execute(sql)
    return cur.fetchone()[0]


def _measure(lw) -> dict:
    with lw.snowflake.connect() as conn:
        cur = conn.cursor()
        return {
            "raw": int(_scalar(cur, RAW_ONHAND)),
            "fct": int(_scalar(cur, FCT_ONHAND)),
            "reorder": _scalar(cur, REORDER),
            "fct_rows": _scalar(cur, "SELECT COUNT(*) FROM INVENTORY.FCT_INVENTORY_POSITION"),
            "dos_rows": _scalar(cur, "SELECT COUNT(*) FROM MART.MART_DAYS_OF_SUPPLY"),
            "dim_rows": _scalar(cur, "SELECT COUNT(*) FROM INVENTORY.DIM_WAREHOUSE"),
        }


def _recorded_nights(lw, world: DistributorWorld) -> list[dict]:
    """Each history night's totals and row counts as its checks recorded them in the ops schema (the tables
    themselves keep only the latest night): the same sums and counts ``_measure`` takes."""
    days = [world.business_date(n) for n in range(HISTORY)]
    with lw.snowflake.connect() as conn:
        cur = conn.cursor()
        cur.execute("SELECT METRIC, BUSINESS_DATE, VALUE FROM DW_OPS.METRIC_HISTORY")
        metric = {(m, d): v for m, d, v in cur.fetchall()}
    volume = {(m.removeprefix("volume:"), d): v for (m, d), v in metric.items() if m.startswith("volume:")}
    return [
        {
            "raw": int(metric[("ebs_onhand_units", day)]),
            "fct": int(metric[("network_onhand_units", day)]),
            "reorder": metric[("reorder_candidates", day)],
            "fct_rows": volume[("inventory/fct_inventory_position", day)],
            "dos_rows": volume[("mart/mart_days_of_supply", day)],
            "dim_rows": volume[("inventory/dim_warehouse", day)],
        }
        for day in days
    ]


@pytest.fixture(scope="module")
def history(seeded_world):
    """The suite's seeded template (60 nights played by the Coalesce job and watched by the checks, as
    ``seeding.seed_history`` plays them): its completed runs, and each night's totals and row counts
    as recorded after its job."""
    world = DistributorWorld()
    coalesce = seeded_world.coalesce_client()
    runs = sorted(coalesce.iter_runs(environment_id="2", run_status="completed"), key=lambda r: r.id)
    nights = _recorded_nights(seeded_world, world)
    return {"lw": seeded_world, "world": world, "coalesce": coalesce, "runs": runs, "nights": nights}


@pytest.fixture(scope="module")
def reference(history):
    """Tonight (an ordinary night, as `world up` plays it), then the reference night, measured."""
    lw, world, coalesce = history["lw"], history["world"], history["coalesce"]
    tonight = world.play_night(lw.snowflake, coalesce, HISTORY)
    before = _measure(lw)
    with lw.snowflake.connect() as conn:
        cur = conn.cursor()
        cur.execute("SELECT INVENTORY_ITEM_ID FROM MART.MART_REORDER_CANDIDATES")
        flagged_before = {r[0] for r in cur.fetchall()}
    result = world.play_reference_night(lw.snowflake, coalesce)
    after = _measure(lw)
    with lw.snowflake.connect() as conn:
        cur = conn.cursor()
        cur.execute("SELECT INVENTORY_ITEM_ID FROM MART.MART_REORDER_CANDIDATES")
        flagged_after = {r[0] for r in cur.fetchall()}
        cur.execute(
            'SELECT COUNT(DISTINCT "INVENTORY_ITEM_ID"), SUM("TRANSACTION_QUANTITY") '
            "FROM RAW_EBS.MTL_ONHAND_QUANTITIES_DETAIL WHERE ORGANIZATION_ID = %s",
            (REF.new_org.id,),
        )
        new_org_skus, new_org_units = cur.fetchone()
        cur.execute(
            'SELECT MAX("_QLIK_LOADED_AT") FROM RAW_EBS.MTL_ONHAND_QUANTITIES_DETAIL '
            "WHERE ORGANIZATION_ID = %s",
            (REF.new_org.id,),
        )
        new_org_loaded = cur.fetchone()[0]
        # The story's test query: on-hand units that match no warehouse.
        unmatched = _scalar(
            cur,
            'SELECT SUM(o."ONHAND_QTY") FROM STAGE.STG_ONHAND o LEFT JOIN INVENTORY.DIM_WAREHOUSE w '
            'ON o."ORGANIZATION_ID" = w."ORGANIZATION_ID" WHERE w."ORGANIZATION_ID" IS NULL',
        )
        # What the mart would list with the LEFT join fix (unmatched orgs kept, bucketed as UNMAPPED).
        left_join_reorder = _scalar(
            cur,
            'SELECT COUNT(*) FROM (SELECT o."INVENTORY_ITEM_ID", SUM(o."ONHAND_QTY") '
            '/ MAX(d."AVG_DAILY_DEMAND_28D") AS dos FROM STAGE.STG_ONHAND o '
            'JOIN STAGE.STG_DEMAND_28D d ON o."INVENTORY_ITEM_ID" = d."INVENTORY_ITEM_ID" GROUP BY 1) '
            f"WHERE dos < {load_spec(WORLD_FILE).reorder.threshold_days}",
        )
    return {
        "tonight": tonight, "result": result, "before": before, "after": after,
        "flagged_before": flagged_before, "flagged_after": flagged_after,
        "new_org_skus": new_org_skus, "new_org_units": int(new_org_units), "new_org_loaded": new_org_loaded,
        "unmatched": int(unmatched), "left_join_reorder": left_join_reorder,
    }  # fmt: skip


@pytest.mark.world
def test_sixty_nights_each_ran_the_job_to_completion(history):
    world, runs = history["world"], history["runs"]
    assert len(runs) == HISTORY == len(history["nights"])
    # Nightly at 02:00 America/Chicago, the day after each business day, one run a night in order.
    tz = ZoneInfo(world.spec.timezone)
    for night, run in enumerate(runs):
        started = run.run_start_time.astimezone(tz)
        assert started.hour == 2 and started.date() - world.business_date(night) == timedelta(days=1)


@pytest.mark.world
def test_tables_have_sensible_row_counts_every_night(history):
    world = history["world"]
    positions = len(world.spec.orgs) * world.spec.sku_count
    for night in history["nights"]:
        assert 0.98 * positions <= night["fct_rows"] <= positions
        assert night["dos_rows"] == world.spec.sku_count
        assert night["dim_rows"] == len(world.spec.orgs)
        # An ordinary night: every org is mapped, so the fact holds all of EBS's units.
        assert night["fct"] == night["raw"]


@pytest.mark.world
def test_reorder_list_holds_at_31_on_ordinary_nights(history):
    assert [n["reorder"] for n in history["nights"]] == [31] * HISTORY


@pytest.mark.world
def test_network_stock_moves_little_day_over_day(history):
    totals = [n["fct"] for n in history["nights"]]
    level = sum(totals) / len(totals)
    assert 2_000_000 < level < 2_200_000
    changes = [abs(b / a - 1) for a, b in itertools.pairwise(totals)]
    assert sum(c <= 0.003 for c in changes) >= 0.95 * len(changes)
    assert max(changes) < 0.005


@pytest.mark.world
def test_weekend_demand_is_lower(history):
    with history["lw"].snowflake.connect() as conn:
        cur = conn.cursor()
        cur.execute(
            'SELECT DAYOFWEEKISO("SHIP_DATE") >= 6, SUM("SHIPPED_QTY") / COUNT(DISTINCT "SHIP_DATE") '
            "FROM STAGE.STG_DEMAND GROUP BY 1"
        )
        per_day = {bool(weekend): float(units) for weekend, units in cur.fetchall()}
    assert 0.5 < per_day[True] / per_day[False] < 0.7


@pytest.mark.world
def test_reference_night_numbers(reference):
    result, before, after = reference["result"], reference["before"], reference["after"]
    assert result.status == "completed"  # the job is green: every test passed
    assert result.business_date.weekday() == 0 and result.scheduled_at.weekday() == 1
    raw_change = (after["raw"] / before["raw"] - 1) * 100
    fct_change = (after["fct"] / before["fct"] - 1) * 100
    assert abs(raw_change - REF.ebs_change_pct) <= 0.1
    assert abs(fct_change - -1.8) <= 0.1
    assert after["raw"] - after["fct"] == REF.transfer_units == 41_800
    assert reference["new_org_units"] == reference["unmatched"] == 41_800
    assert reference["new_org_skus"] == REF.transfer_skus == 1_260
    assert before["reorder"] == 31 and after["reorder"] == 195
    assert len(reference["flagged_after"] - reference["flagged_before"]) == 164
    assert reference["flagged_before"] <= reference["flagged_after"]
    assert reference["left_join_reorder"] == 31
    # Row counts stay in range: the loss is in values, not a failed load.
    assert after["fct_rows"] >= 0.98 * before["fct_rows"]
    # Qlik applied the new org's rows at 14:06 Chicago (19:06 UTC in June).
    assert reference["new_org_loaded"].strftime("%H:%M") == "19:06"


@pytest.mark.world
def test_region_map_fix_restores_the_numbers(history, reference):
    lw, world, coalesce = history["lw"], history["world"], history["coalesce"]
    world.apply_region_map_fix(lw.snowflake)
    world.apply_region_map_fix(lw.snowflake)  # idempotent
    night = reference["result"].night
    morning = world.scheduled_at(night).replace(hour=8, minute=5)
    rerun = world.run_job(coalesce, night, at=morning)
    assert rerun.status == "completed"
    fixed = _measure(lw)
    assert fixed["reorder"] == 31
    assert fixed["raw"] == fixed["fct"]
    assert fixed["dim_rows"] == len(world.spec.orgs) + 1


@pytest.mark.world
def test_with_the_scheduler_on_the_night_is_the_scheduled_run(tmp_path: Path):
    """`world up` runs the simulator's Scheduler: the night's run is the one the 02:00 schedule starts,
    and a morning rerun is started through the API; never two runs for one night."""
    from dw_local.world import LocalWorld

    with LocalWorld(tmp_path / "local", scheduler=True) as lw:
        world, coalesce = DistributorWorld(), lw.coalesce_client()
        world.install(lw.snowflake)
        nights = [world.play_night(lw.snowflake, coalesce, n) for n in range(2)]
        morning = world.scheduled_at(1).replace(hour=8, minute=5)
        rerun = world.run_job(coalesce, 1, at=morning)
        runs = {r.id: r for r in coalesce.iter_runs(environment_id="2")}
    assert [n.status for n in nights + [rerun]] == ["completed"] * 3
    assert sorted(runs) == sorted(n.run_id for n in nights + [rerun])
    assert runs[nights[1].run_id].run_start_time.hour == 7  # 02:00 CDT
    assert runs[rerun.run_id].run_start_time.hour == 13  # 08:05 CDT


@pytest.mark.world
def test_the_seeded_history_carries_each_nights_business_time(seeded_world):
    """The template's events were stored on each night's time, so the UI's plots and check history read night
    by night: the fact's materializations fall a minute after each night's 02:00 job, one a night."""
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo

    import dagster as dg

    world = DistributorWorld()
    tz = ZoneInfo(world.spec.timezone)
    instance = dg.DagsterInstance.from_config(str(seeded_world.root / "dagster_home"))
    key = dg.AssetKey(["inventory", "fct_inventory_position"])
    records = instance.fetch_materializations(key, limit=200).records
    # The template holds the history only; a clone's later nights (other tests) come after it.
    history = sorted(datetime.fromtimestamp(r.timestamp, tz) for r in records)[:HISTORY]
    expected = [world.scheduled_at(n) + timedelta(minutes=1) for n in range(HISTORY)]
    assert [t.date() for t in history] == [e.date() for e in expected]
    assert all(timedelta(0) <= t - e < timedelta(minutes=10) for t, e in zip(history, expected, strict=True))
