"""The baselines' rules on the local world's real servers, on the e-commerce and the distributor worlds:
calendar nights at most WARN (a holiday period too, and a fault in it an ERROR), a new key mapped raises
nothing, an accepted level raises nothing the next night, a NULL-valued source group is caught. (A remap
between groups naming both groups is asserted on the suite's own play of it, test_suite_ecommerce_faults.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from world_cache import WORLD_CACHE

from dw_dagster.app.cli import main
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.daemon import LocalDaemon, TickOutcome
from dw_local.scenarios.model import load_scenario
from dw_local.scenarios.suite import SUITE_DIR

pytestmark = [pytest.mark.world, pytest.mark.timeout(900)]

ECOMMERCE = SUITE_DIR.parent / "worlds" / "ecommerce"


class Played:
    def __init__(self, outcomes: list[TickOutcome], incidents: list):
        self.outcomes = outcomes
        self.incidents = incidents

    def check(self, night: int, check: str, asset: str):
        return next(c for c in self.outcomes[night].checks if (c.check, c.asset) == (check, asset))

    def errors(self, night: int) -> list[str]:
        return [f"{c.check} on {c.asset}: {c.description}" for c in self.outcomes[night].failed("ERROR")]


def play(tmp_path: Path, world: str, nights: list[dict], metrics=None, between=None) -> Played:
    """Plays ``nights`` (scenario nights) on a fresh copy of ``world``'s seeded template, its metrics file
    edited by ``metrics(dict)`` if given; ``between(night, daemon)`` runs after each night's tick."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump({"name": "baselines-test", "world": world, "nights": nights}))
    scenario = load_scenario(path)
    w = scenario.world
    environ = dict(os.environ)
    try:
        root = w.clone(WORLD_CACHE.resolve(), tmp_path / "world")
        with w.local_world(root) as lw:
            env = w.env()
            if metrics is not None:
                source = Path(env.get("DW_METRICS_FILE") or lw.env()["DW_METRICS_FILE"])
                edited = yaml.safe_load(source.read_text())
                metrics(edited)
                (tmp_path / "metrics.yaml").write_text(yaml.safe_dump(edited))
                env = {**env, "DW_METRICS_FILE": str(tmp_path / "metrics.yaml")}
            daemon = LocalDaemon(lw, env=env)
            outcomes = []
            for k in range(len(scenario.file.nights)):
                w.play_night(lw, scenario.night_index(k), scenario.events[k])
                outcomes.append(daemon.tick())
                if between:
                    between(k, daemon)
            store = IncidentStore(daemon.defs.resources["snowflake"], OpsSchema(w.database, "DW_OPS"))
            return Played(outcomes, store.list())
    finally:
        os.environ.clear()
        os.environ.update(environ)


def test_ecommerce_month_end_and_a_holiday_raise_at_most_warn(tmp_path):
    # Wednesday 28 May is declared a day the shop is closed for part of the day: 40% of its orders missing.
    def closure(m):
        m["calendar"]["dates"] = [
            {"date": "2025-05-28", "name": "Storefront maintenance", "direction": "down"}
        ]

    played = play(
        tmp_path,
        str(ECOMMERCE / "world.yaml"),
        [
            {},
            {
                "events": [{"kind": "partial_load", "table": "ORDER_LINES", "fraction": 0.4}],
                "expect": {"incident": False},
            },
            {},
            {},
            {},
        ],
        metrics=closure,
    )
    for night in range(5):
        assert played.errors(night) == [], night
    assert played.incidents == []
    revenue = played.check(1, "total_daily_revenue", "sales/fct_sales")
    assert revenue.severity == "WARN" and revenue.passed is False
    assert "Storefront maintenance: no past night like it on record" in revenue.description
    volume = played.check(1, "volume", "sales/fct_sales")
    assert volume.severity == "WARN" and volume.metadata["baseline_calendar_day"] == "Storefront maintenance"
    # Friday 30 and Saturday 31 May: month-ends, compared with April's.
    for night in (3, 4):
        fact = played.check(night, "volume", "sales/fct_sales")
        assert fact.metadata["baseline_calendar_day"].startswith("month-end"), night
        assert (
            "2025-04-29" in fact.metadata["baseline_judgement"]
            or "2025-04-30" in fact.metadata["baseline_judgement"]
        )


def test_ecommerce_a_holiday_period_is_at_most_warn_and_a_fault_in_it_an_error(tmp_path):
    # The shop closes its storefront on Thursday 29 May, three days after Memorial Day (Monday 26): the
    # days between are a holiday period. Tuesday 27 loses 40% of its orders to it (the first day between on
    # record: a WARN); on Wednesday 28 a fault loses 80%, twice what the period did the night before.
    def closure(m):
        m["calendar"]["dates"] = [{"date": "2025-05-29", "name": "Storefront closed", "direction": "down"}]

    def partial(fraction: float) -> dict:
        return {"kind": "partial_load", "table": "ORDER_LINES", "fraction": fraction}

    played = play(
        tmp_path,
        str(ECOMMERCE / "world.yaml"),
        [
            {"events": [partial(0.4)], "expect": {"incident": False, "max_severity": "WARN"}},
            {"events": [partial(0.8)], "expect": {"class": ["volume_loss"]}},
        ],
        metrics=closure,
    )
    assert played.errors(0) == []
    revenue = played.check(0, "total_daily_revenue", "sales/fct_sales")
    assert revenue.severity == "WARN" and revenue.passed is False
    assert revenue.metadata["baseline_calendar_day"] == (
        "between holidays (Memorial Day 2025-05-26 to Storefront closed 2025-05-29)"
    )
    fault = played.check(1, "total_daily_revenue", "sales/fct_sales")
    assert fault.severity == "ERROR" and fault.passed is False
    assert "compared with 1 past like night (2025-05-27" in fault.metadata["baseline_judgement"]
    assert played.incidents and all(i.business_date.isoformat() == "2025-05-28" for i in played.incidents)


def test_ecommerce_a_null_valued_source_group_is_caught(tmp_path):
    # The source total looks each line's storefront up; a storefront the map lacks has no value (NULL),
    # which used to be summed as zero while those lines vanished from the target too.
    def lookup(m):
        source = next(t for t in m["totals"] if t["name"] == "shop_revenue")
        source["sql"] = (
            'SELECT "OL"."STORE_ID", SUM(CASE WHEN "S"."STORE_ID" IS NOT NULL THEN "OL"."QUANTITY" * '
            '"OL"."UNIT_PRICE" END) AS "VALUE", COUNT(*) AS "ROWS"\n'
            "FROM {{ ref('RAW_SHOP', 'ORDER_LINES') }} \"OL\"\n"
            'LEFT JOIN {{ ref(\'REF_MARKETING\', \'STORE_MAP\') }} "S" ON "S"."STORE_ID" = "OL"."STORE_ID"\n'
            'WHERE CAST("OL"."ORDERED_AT" AS DATE) = (SELECT MAX(CAST("ORDERED_AT" AS DATE)) FROM '
            "{{ ref('RAW_SHOP', 'ORDER_LINES') }})\n"
            'GROUP BY "OL"."STORE_ID"'
        )

    event = {
        "kind": "new_key_unmapped",
        "table": "ORDER_LINES",
        "column": "STORE_ID",
        "value": 9,
        "fraction": 0.06,
    }
    nights = [{}, {"events": [event], "expect": {"class": ["value_loss"]}}]
    played = play(tmp_path, str(ECOMMERCE / "world.yaml"), nights, metrics=lookup)
    assert played.errors(0) == []
    by = {c.check: c for c in played.outcomes[1].failed("ERROR")}
    for check in ("total_shop_revenue", "total_daily_revenue"):
        assert check in by, played.errors(1)
        assert "rows with no" in by[check].description and "(STORE_ID=9)" in by[check].description
        assert "not counted as zero" in by[check].description


def test_a_new_key_mapped_raises_nothing_on_both_worlds(tmp_path):
    store7 = {
        "kind": "new_key_mapped", "table": "ORDER_LINES", "column": "STORE_ID", "value": 7, "fraction": 0.06,
        "reference": "STORE_MAP",
        "row": {"STORE_ID": 7, "STORE_NAME": "US social", "CHANNEL": "social", "COUNTRY": "US",
                "UPDATED_AT": "2025-05-28 13:00:00"},
    }  # fmt: skip
    ecommerce = play(tmp_path / "e", str(ECOMMERCE / "world.yaml"), [{}, {"events": [store7]}, {}])
    dim = ecommerce.check(1, "volume", "sales/dim_store")
    assert dim.passed is True and dim.metadata["rows_changed"] == "1 row appeared: STORE_ID=7"
    distributor = play(tmp_path / "d", "distributor", [{}, {"events": [{"kind": "new_key_mapped"}]}, {}])
    for played in (ecommerce, distributor):
        for night in range(3):
            assert played.errors(night) == [], night
        assert played.incidents == []
    fact = distributor.check(1, "volume", "inventory/fct_inventory_position")
    assert fact.passed is True and "(explained)" in fact.metadata["baseline_level"]
    assert (
        "ORGANIZATION_ID=" in fact.metadata["baseline_level"] and "new in" in fact.metadata["baseline_level"]
    )
    # The next night is judged at the new level, not as the first night again.
    after = distributor.check(2, "volume", "inventory/fct_inventory_position")
    assert after.passed is True and after.metadata["baseline_status"] == "ok"


def test_an_accepted_level_raises_nothing_the_next_night(tmp_path):
    # From Wednesday on, half of each night's order lines arrive twice: the fact's new level, as far as
    # this test is concerned, which its owner accepts after the first night.
    doubled = {"events": [{"kind": "duplicate_load", "table": "ORDER_LINES", "fraction": 0.5}],
               "expect": {"class": ["duplication"]}}  # fmt: skip
    said = {}

    def accept(night, daemon):
        if night != 1:
            return
        runner = CliRunner()
        refused = runner.invoke(main, ["baseline", "accept", "sales/fct_sales", "--check", "volume",
                                       "--as", "Dora Fischer", "--reason", "campaign"])  # fmt: skip
        said["refused"] = refused.output
        done = runner.invoke(main, ["baseline", "accept", "sales/fct_sales", "--check", "volume",
                                    "--as", "Ana Souza", "--reason", "orders now arrive split in two"])  # fmt: skip
        said["accepted"] = done.output

    played = play(tmp_path, str(ECOMMERCE / "world.yaml"), [{}, doubled, doubled], between=accept)
    fact = played.check(1, "volume", "sales/fct_sales")
    assert fact.severity == "ERROR", "+50% over ordinary Wednesdays is an anomaly before anyone accepts it"
    assert "Dora Fischer is not an owner of sales/fct_sales" in said["refused"]
    assert "new level from 2025-05-28 accepted by Ana Souza" in said["accepted"]
    nxt = played.check(2, "volume", "sales/fct_sales")
    assert nxt.passed is True, nxt.description
    assert "accepted by Ana Souza" in nxt.metadata["baseline_level"]
    assert [e for e in played.errors(2) if "volume" in e] == []
