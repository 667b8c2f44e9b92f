"""The event vocabulary on a world written as files (e-commerce), played over the local servers: a table not
refreshed while the others move on, a reference table's sync that did not run, a sign flip on a subset,
and a skipped night seen by Dagster's freshness policies evaluated as its daemon does."""

from __future__ import annotations

from datetime import datetime

import dagster as dg
import numpy as np
import pytest
from world_cache import running_copy

from dw_local.daemon import LocalDaemon
from dw_local.scenarios.suite import SUITE_DIR
from dw_local.scenarios.worlds import FileScenarioWorld
from dw_local.worlds.night_world import to_utc

pytestmark = [pytest.mark.world, pytest.mark.timeout(900)]
ECOMMERCE = SUITE_DIR.parent / "worlds" / "ecommerce" / "world.yaml"
LINES = "RAW_SHOP.ORDER_LINES"


@pytest.fixture(scope="module")
def ecommerce(tmp_path_factory):
    world = FileScenarioWorld(ECOMMERCE)
    with running_copy(world, tmp_path_factory.mktemp("ecommerce")) as lw:
        yield {"world": world, "lw": lw, "night": world.history_nights, "daemon": None}


def _play(state, *events):
    world, night = state["world"], state["night"]
    parsed = [world.parse_event(e, world.history_nights) for e in events]
    result = world.play_night(state["lw"], night, parsed)
    state["night"] = night + 1
    return result


def _one(state, sql: str, params: tuple = ()):
    with state["lw"].snowflake.connect(database=state["world"].database) as conn:
        cur = conn.cursor()
        cur.execute(sql, params)
        return cur.fetchone()[0]


def _synced_at(state, night: int) -> datetime:
    """When the catalogue's nightly sync stamps PRODUCTS (23:30 New York on the business day), in UTC."""
    world = state["world"].world
    local = datetime.combine(world.business_date(night), world.spec.sources["PRODUCTS"].refresh.at)
    return to_utc(np.array([np.datetime64(local, "s")]), world.tz.key)[0].item()


def test_a_table_not_refreshed_holds_back_its_rows_until_the_next_night(ecommerce):
    world = ecommerce["world"].world
    before = _one(ecommerce, f"SELECT COUNT(*) FROM {LINES}")
    night = ecommerce["night"]
    assert _play(ecommerce, {"kind": "source_not_refreshed", "table": "ORDER_LINES"}).status == "completed"
    assert _one(ecommerce, f"SELECT COUNT(*) FROM {LINES}") == before
    # The other tables moved on: the catalogue's sync ran.
    assert _one(ecommerce, 'SELECT MAX("_FIVETRAN_SYNCED") FROM RAW_SHOP.PRODUCTS') == _synced_at(
        ecommerce, night
    )
    assert _play(ecommerce).status == "completed"
    caught_up = world.rows_tonight("ORDER_LINES", night) + world.rows_tonight("ORDER_LINES", night + 1)
    assert _one(ecommerce, f"SELECT COUNT(*) FROM {LINES}") == before + caught_up


def test_a_reference_table_not_refreshed_keeps_its_stamp_and_tonights_new_row(ecommerce):
    night = ecommerce["night"]
    row = {"PRODUCT_ID": 99001, "SKU": "SKU-99001", "CATEGORY": "toys", "LIST_PRICE": 19.5,
           "_FIVETRAN_SYNCED": "2025-06-01 03:00:00"}  # fmt: skip
    new_product = {"kind": "new_key_mapped", "table": "ORDER_LINES", "column": "PRODUCT_ID", "value": 99001,
                   "fraction": 0.05, "reference": "PRODUCTS", "row": row}  # fmt: skip
    stale = {"kind": "source_not_refreshed", "table": "PRODUCTS"}
    assert _play(ecommerce, new_product, stale).status == "completed"
    products = 'SELECT COUNT(*) FROM RAW_SHOP.PRODUCTS WHERE "PRODUCT_ID" = 99001'
    assert _one(ecommerce, products) == 0
    assert _one(ecommerce, 'SELECT MAX("_FIVETRAN_SYNCED") FROM RAW_SHOP.PRODUCTS') == _synced_at(
        ecommerce, night - 1
    )
    # The fact's left join to the catalogue finds no category for the new product's lines.
    uncategorised = 'SELECT COUNT(*) FROM SALES.FCT_SALES WHERE "PRODUCT_ID" = 99001 AND "CATEGORY" IS NULL'
    assert _one(ecommerce, uncategorised) > 0
    # The next sync brings the row the owners added, and a fresh stamp.
    assert _play(ecommerce).status == "completed"
    assert _one(ecommerce, products) == 1
    assert _one(ecommerce, 'SELECT MAX("_FIVETRAN_SYNCED") FROM RAW_SHOP.PRODUCTS') == _synced_at(
        ecommerce, night + 1
    )


def test_a_sign_flip_on_one_store_fails_the_facts_test(ecommerce):
    flip = {"kind": "unit_change", "table": "ORDER_LINES", "column": "UNIT_PRICE", "factor": -1,
            "where": {"STORE_ID": 4}}  # fmt: skip
    result = _play(ecommerce, flip)
    assert result.status == "failed"
    tonight = (
        f'SELECT MIN("UNIT_PRICE") FROM {LINES} WHERE CAST("ORDERED_AT" AS DATE) = %s AND "STORE_ID" = %s'
    )
    day = ecommerce["world"].business_date(ecommerce["night"] - 1)
    assert _one(ecommerce, tonight.replace("MIN", "MAX"), (day, 4)) < 0
    assert _one(ecommerce, tonight, (day, 3)) > 0
    results = ecommerce["lw"].coalesce_client().get_run_results(result.run_id).data
    failed = {r.name: [q.name for q in r.query_results if not q.success] for r in results}
    assert failed["FCT_SALES"] == ["NO_NEGATIVE_REVENUE"]


def test_a_skipped_night_fails_the_freshness_policies_as_dagsters_daemon_evaluates_them(ecommerce):
    daemon = LocalDaemon(ecommerce["lw"], env=ecommerce["world"].env())
    clean = _play(ecommerce)
    outcome = daemon.tick(at=clean.watched_at)
    built = {"sales/fct_sales", "mart/mart_channel_revenue", "stage/stg_order_lines"}
    assert built <= set(outcome.freshness) and outcome.stale() == []
    skipped = _play(ecommerce, {"kind": "scheduler_skip"})
    assert skipped.run_id is None
    outcome = daemon.tick(at=skipped.watched_at)
    assert built <= set(outcome.stale())
    # The state change is stored as Dagster's freshness daemon stores it; the next night's build clears it.
    again = _play(ecommerce)
    assert daemon.tick(at=again.watched_at).stale() == []
    records = daemon.instance.get_freshness_state_records([dg.AssetKey(["sales", "fct_sales"])])
    assert [r.freshness_state.value for r in records.values()] == ["PASS"]
