"""A reference row re-pointed to another value of a text attribute, read by its own key (``checks/repointed.py``).

A customer group of 8% of the intake moved from one sales district to another moves a district's share by
less than the shares' own day-to-day spread: the shares cannot tell it. The total's table carries the key
the attribute is looked up by, so the total's aggregate is recorded by key and value night by night; a key
wholly under one value on its last nights and wholly under another tonight was re-pointed, and is named.

The check on two synthetic shapes whose attribute shares are wide (customer groups by sales district,
feeders by operating region); the night's statement, the key found from the lineage and the diagnosis on two
pipelines under fakesnow (``key_shapes``: plans' segments, districts' managers). And what is no re-pointing:
a new key, a key mapped from NULL, a key split between values, a fix back to the old value, a key under 1%
of the total, the night after a re-pointing."""

from __future__ import annotations

import math
import random
from datetime import UTC, date, datetime, timedelta

import dagster as dg
import pytest
from diagnosis_db import node_spec
from key_shapes import ITEMS, KEYS, NUM, SHAPES, TEXT, build, open_world, resolve

from dw_dagster.checks.attributes import attribute_series
from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.history import Reading, Recorded
from dw_dagster.checks.measure import Binds, measure
from dw_dagster.checks.metrics import MetricsFile, RecordedTotal
from dw_dagster.checks.recorded_totals import Totals, check_name, evaluate_total
from dw_dagster.checks.repointed import mapping_series, reference_key, repointed
from dw_dagster.checks.run_context import CheckRun
from dw_dagster.checks.tonight import Night
from dw_dagster.checks.total_value import TotalValue
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.group_shift import attribute_shift_diagnosis
from dw_dagster.records.incidents import CauseClass, Finding, Incident

DAY = date(2026, 5, 20)
# name, asset, group key of the total, attribute, reference key, {key: (usual units, value)}.
WIDE = {
    "districts": ("intake", "mart/district_sales", "CURRENCY", "SALES_DISTRICT", "CUSTOMER_GROUP_ID",
                  {"10": (300, "MUC"), "11": (200, "MUC"), "20": (250, "NUE"), "21": (80, "NUE"),
                   "30": (120, "AUG"), "40": (50, "REG")}),
    "regions": ("energy", "core/fct_readings", "TARIFF", "REGION", "FEEDER_ID",
                {"401": (90, "SOUTH"), "402": (260, "SOUTH"), "501": (310, "EAST"), "601": (180, "WEST"),
                 "602": (140, "WEST")}),
}  # fmt: skip


def _label(key_column: str, key: str, column: str, value: str | None) -> str:
    return f"{key_column}={key}, {column}={value}"


def _night_units(rng: random.Random, keys: dict) -> dict[str, float]:
    # Each key's units noisy on their own (a few large customers): the values' shares range widely.
    return {k: units * math.exp(rng.gauss(0, 0.35)) for k, (units, _) in keys.items()}


def _check(shape: str, tonight_values: dict[str, str | None], *, extra=None, history=None, read_keys=True):
    """The total's check tonight, every key mapped as ``tonight_values`` says (``extra``: more keys
    tonight, key -> (units, value)); ``history(day, key, value)`` may change a key's value on a past night.
    Returns the check's result and the finding it reported."""
    name, asset, group, column, key_column, keys = WIDE[shape]
    total = RecordedTotal.model_validate(
        {"name": name, "owner": "bi", "asset": asset, "group_keys": [group], "sql": "SELECT 1 AS VALUE",
         "baseline": {"calendar": False}}
    )  # fmt: skip
    rng = random.Random(11)
    own, by_value, by_key = {}, {}, {}
    for d in range(42, 0, -1):
        day = DAY - timedelta(days=d)
        units = _night_units(rng, keys)
        values = {k: (history(day, k, v) if history else v) for k, (_, v) in keys.items()}
        level = sum(units.values())
        own[day] = Recorded(business_date=day, value=level, groups={f"{group}=EUR": level})
        attr: dict[str, float] = {}
        for k, u in units.items():
            attr[f"{column}={values[k]}"] = attr.get(f"{column}={values[k]}", 0.0) + u
        by_value[day] = Recorded(business_date=day, value=level, groups=attr)
        mapped = {_label(key_column, k, column, values[k]): u for k, u in units.items()}
        by_key[day] = Recorded(business_date=day, value=level, groups=mapped)
    units = {k: u for k, (u, _) in keys.items()} | {k: u for k, (u, _) in (extra or {}).items()}
    values = tonight_values | {k: v for k, (_, v) in (extra or {}).items()}
    whole = sum(units.values())
    attr = {}
    for k, u in units.items():
        attr[f"{column}={values[k]}"] = attr.get(f"{column}={values[k]}", 0.0) + u
    mapped = {_label(key_column, k, column, values[k]): u for k, u in units.items()}
    found = []
    night = Night(
        context=None, run=CheckRun(DAY, "test-run", None, None), warehouse=None, ops=None, history=None,
        cause_scopes={}, calendar=BusinessCalendar.model_validate({"holidays": []}), levels={},
        incident_days=set(), past={name: own, attribute_series(name, column): by_value,
                                   mapping_series(name, column): by_key},
        reporter=found.append, shares={asset: 2},
    )  # fmt: skip
    value = TotalValue(value=whole, groups={f"{group}=EUR": whole})
    night.record(name, Reading(value=whole, groups=value.groups))
    night.record(mapping_series(name, column), Reading(value=whole, groups=mapped))  # as the checks do first
    result = evaluate_total(
        night,
        total,
        {name: value},
        {(name, column): (whole, attr)},
        mappings={(name, column): mapped} if read_keys else {},
    )
    return result, found


def _usual(shape: str) -> dict[str, str | None]:
    return {k: v for k, (_, v) in WIDE[shape][5].items()}


def _moved(shape: str) -> tuple[str, str, str]:
    """The key to re-point (the second smallest: 8-10% of the total), its value and another value."""
    keys = WIDE[shape][5]
    key = sorted(keys, key=lambda k: keys[k][0])[1]
    other = next(v for _, v in keys.values() if v != keys[key][1])
    return key, keys[key][1], other


@pytest.mark.parametrize("shape", WIDE)
def test_a_reference_row_re_pointed_within_the_values_spread_is_named_by_its_key(shape):
    _, _, _, column, key_column, _ = WIDE[shape]
    key, before, after = _moved(shape)
    result, (finding,) = _check(shape, _usual(shape) | {key: after})
    assert result.passed is False
    assert f"{key_column}={key} moved from {column}={before} to {column}={after}" in (
        result.description or ""
    )
    (moved,) = finding.evidence["attribute_shift"]["repointed"]
    assert moved["key"] == f"{key_column}={key}" and moved["before"] == before and moved["after"] == after
    # What the rule adds: the values' shares alone pass the very night the key moved.
    assert _check(shape, _usual(shape) | {key: after}, read_keys=False)[0].passed


@pytest.mark.parametrize("shape", WIDE)
def test_what_is_no_re_pointing_raises_nothing(shape):
    name, asset, group, column, key_column, keys = WIDE[shape]
    key, before, after = _moved(shape)
    usual = _usual(shape)
    # A new key mapped to a value; a key mapped tonight, NULL on every night before.
    assert _check(shape, usual, extra={"999": (90, after)})[0].passed
    assert _check(shape, usual, history=lambda day, k, v: None if k == key else v)[0].passed
    # A key split between values on the nights before (an attribute that varies within the key).
    split = _check(
        shape,
        usual | {key: after},
        history=lambda day, k, v: (after if day.day % 2 else v) if k == key else v,
    )
    assert split[0].passed
    # Back to its old value after one night on another (a fix), and the night after a re-pointing.
    assert _check(
        shape, usual, history=lambda day, k, v: after if k == key and day == DAY - timedelta(days=1) else v
    )[0].passed
    assert _check(
        shape,
        usual | {key: after},
        history=lambda day, k, v: after if k == key and day == DAY - timedelta(days=1) else v,
    )[0].passed


@pytest.mark.parametrize("shape", WIDE)
def test_a_key_under_one_percent_of_the_total_is_not_a_finding(shape):
    name, asset, group, column, key_column, keys = WIDE[shape]
    _, before, after = _moved(shape)
    tiny = {"7": (2, before)}
    moved = repointed(
        column, DAY, {_label(key_column, k, column, after if k == "7" else v): u for k, (u, v) in (keys | tiny).items()},
        {DAY - timedelta(days=d): Recorded(business_date=DAY - timedelta(days=d), value=1000, groups={
            _label(key_column, k, column, v): u for k, (u, v) in (keys | tiny).items()}) for d in range(1, 5)},
        sum(u for u, _ in (keys | tiny).values()),
    )  # fmt: skip
    assert moved == []


# On pipelines under fakesnow: the key from the lineage, the night's statement, the diagnosis.


@pytest.fixture(params=SHAPES)
def world(request):
    with open_world(request.param) as s:
        yield s


def _mapping(s) -> dict[str, float | None]:
    """Tonight's units by reference key and attribute value, read in the night's statement as the checks do."""
    name = s.total.name
    totals = Totals(
        MetricsFile.model_validate({"totals": [s.total.model_dump()]}), resolve, [check_name(s.total)],
        attributes={name: [s.key, s.attr]}, keys={name: {s.key}},
        references={name: {s.attr: reference_key(s.graph, s.node, s.attr)}},
    )  # fmt: skip
    totals.take(measure(s.ctx.cursor, totals.parts(), Binds()), s.ctx.cursor)
    return totals.mappings[(name, s.attr)]


def test_the_key_an_attribute_is_looked_up_by_comes_from_the_joins(world):
    s = world
    # SEGMENT / MANAGER are read from the second lookup by PLAN_ID / DISTRICT_ID, which the fact carries.
    assert reference_key(s.graph, s.node, s.attr) == [s.key]
    # The price is read from the same row, by the same key.
    assert reference_key(s.graph, s.node, "PRICE") == [s.key]


def test_a_node_above_whose_input_is_not_described_is_passed_over(world):
    # The fact's raw table built from a feed known only as its dep (no columns, no table): its join cannot
    # be read, the lookups' can.
    s = world
    raw = s.specs[0].key.to_user_string()
    fed = node_spec(raw, s.fact_t.replace('"', ""), {s.item: NUM, s.group: TEXT, s.measure: NUM},
                    {c: [("api/feed", c)] for c in (s.item, s.group, s.measure)},
                    "FROM {{ ref('API', 'FEED') }} \"G\"")  # fmt: skip
    graph = LineageGraph([fed if spec.key.to_user_string() == raw else spec for spec in s.specs])
    assert reference_key(graph, s.node, s.attr) == [s.key]


@pytest.mark.parametrize("versioned", [False, True])
def test_a_type_2_dimensions_row_is_no_row_to_read_a_key_by(versioned):
    # A tariff's row by plan and the date it is valid from: a plan's value changes on its new version's first
    # day, which is no re-pointing.
    on = '"F"."PLAN_ID" = "T"."PLAN_ID"' + (
        ' AND "F"."USED_ON" BETWEEN "T"."VALID_FROM" AND "T"."VALID_TO"' if versioned else ""
    )
    specs = [
        node_spec("raw/usage", "DB.RAW.USAGE", {"PLAN_ID": NUM, "USED_ON": "DATE", "MB": NUM}),
        node_spec("ref/tariffs", "DB.REF.TARIFFS",
                  {"PLAN_ID": NUM, "TIER": TEXT, "VALID_FROM": "DATE", "VALID_TO": "DATE"}),
        node_spec("core/fct_usage", "DB.CORE.FCT_USAGE", {"PLAN_ID": NUM, "TIER": TEXT, "MB": NUM},
                  {"PLAN_ID": [("raw/usage", "PLAN_ID")], "TIER": [("ref/tariffs", "TIER")],
                   "MB": [("raw/usage", "MB")]},
                  f"FROM {{{{ ref('RAW', 'USAGE') }}}} \"F\" INNER JOIN {{{{ ref('REF', 'TARIFFS') }}}} \"T\" ON {on}"),
    ]  # fmt: skip
    assert reference_key(LineageGraph(specs), "core/fct_usage", "TIER") == ([] if versioned else ["PLAN_ID"])


def test_a_reference_row_edited_tonight_is_named_by_its_key_and_its_table(world):
    s = world
    usual = {item: key for item, _, _, key in ITEMS}
    build(s, usual)
    assert _mapping(s) == {
        f"{s.key}=11, {s.attr}=PREPAID": 180, f"{s.key}=12, {s.attr}=POSTPAID": 115,
        f"{s.key}=15, {s.attr}=BUSINESS": 60,
    }  # fmt: skip
    past = {}
    for d in range(1, 5):
        day = DAY - timedelta(days=d)
        past[day] = Recorded(business_date=day, value=355, groups=_mapping(s))
    # Plan / district 15's row in the second lookup now says POSTPAID.
    build(s, usual, [k if k[0] != 15 else (15, "POSTPAID", k[2]) for k in KEYS])
    tonight = _mapping(s)
    (moved,) = repointed(s.attr, DAY, tonight, past, 355)
    assert (moved.key, moved.before, moved.after, moved.units) == (f"{s.key}=15", "BUSINESS", "POSTPAID", 60)
    finding = Finding(
        check_name=f"total_{s.total.name}", asset_key=s.node, business_date=DAY, summary="re-pointed",
        cause_scope="job:x",
        evidence={"attribute_shift": {"column": s.attr, "series": attribute_series(s.total.name, s.attr),
                                      "moves": [], "repointed": [moved.model_dump(mode="json")]}},
    )  # fmt: skip
    now = datetime.now(UTC)
    incident = Incident(incident_id="INC-1", cause_key="k", status="open", business_date=DAY, title="t",
                        severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip
    d = attribute_shift_diagnosis(incident, finding, s.total, s.ctx)
    assert d is not None and d.classification is CauseClass.REFERENCE_DATA_CHANGE
    (key,) = d.keys
    assert key.label == f"{s.key}=15" and key.units == 60 and "BUSINESS -> POSTPAID" in (key.change or "")
    # The table the attribute is read from, not the fact: its owners are the ones to ask.
    assert d.cause_asset == f"ref/{s.keys_t.split('.')[-1].strip(chr(34)).lower()}"


# What the review found: the join the attribute is looked up by, and what is no re-pointing.


def _orders(join: str, lineage: dict, columns: dict) -> LineageGraph:
    """Order lines joined to customers in ``core/fct_orders`` by ``join`` (``O``: the lines, ``C``: the
    customers), the fact's columns from ``lineage``."""
    return LineageGraph(_order_specs(join, lineage, columns))


def _order_specs(join: str, lineage: dict, columns: dict) -> list:
    return [
        node_spec("raw/orders", "DB.RAW.ORDERS",
                  {"ORDER_ID": NUM, "CUST_ID": NUM, "SHIP_CUST_ID": NUM, "REFERRER_ID": NUM, "AMOUNT": NUM}),
        node_spec("ref/customers", "DB.REF.CUSTOMERS",
                  {"CUST_ID": NUM, "SEGMENT": TEXT, "IS_CURRENT": "BOOLEAN"}),
        node_spec("core/fct_orders", "DB.CORE.FCT_ORDERS", columns, lineage,
                  "FROM {{ ref('RAW', 'ORDERS') }} \"O\" " + join),
    ]  # fmt: skip


ON_CUSTOMER = 'INNER JOIN {{ ref(\'REF\', \'CUSTOMERS\') }} "C" ON "O"."CUST_ID" = "C"."CUST_ID"'
FACT = {"ORDER_ID": NUM, "CUST_ID": NUM, "SEGMENT": TEXT, "AMOUNT": NUM}
FACT_LINEAGE = {"ORDER_ID": [("raw/orders", "ORDER_ID")], "CUST_ID": [("raw/orders", "CUST_ID")],
                "SEGMENT": [("ref/customers", "SEGMENT")], "AMOUNT": [("raw/orders", "AMOUNT")]}  # fmt: skip


def test_the_key_is_the_one_the_attribute_is_looked_up_by_not_another_join_to_its_table():
    # The order lines' staging joins the customers by the referrer (the referrer's segment); the fact joins
    # them again by the buyer, for the segment the totals carry.
    stg_cols = {"ORDER_ID": NUM, "CUST_ID": NUM, "REFERRER_ID": NUM, "REFERRER_SEGMENT": TEXT, "AMOUNT": NUM}
    raw = {c: [("raw/orders", c)] for c in ("ORDER_ID", "CUST_ID", "REFERRER_ID", "AMOUNT")}
    stg = node_spec(
        "core/a_stg_orders", "DB.CORE.A_STG_ORDERS", stg_cols,
        {**raw, "REFERRER_SEGMENT": [("ref/customers", "SEGMENT")]},
        "FROM {{ ref('RAW', 'ORDERS') }} \"O\" INNER JOIN {{ ref('REF', 'CUSTOMERS') }} \"C\" "
        "ON \"O\".\"REFERRER_ID\" = \"C\".\"CUST_ID\"",
    )  # fmt: skip
    # The fact carries the referrer too.
    fact = node_spec(
        "core/fct_orders", "DB.CORE.FCT_ORDERS", {**FACT, "REFERRER_ID": NUM},
        {"ORDER_ID": [("core/a_stg_orders", "ORDER_ID")], "CUST_ID": [("core/a_stg_orders", "CUST_ID")],
         "REFERRER_ID": [("core/a_stg_orders", "REFERRER_ID")],
         "SEGMENT": [("ref/customers", "SEGMENT")], "AMOUNT": [("core/a_stg_orders", "AMOUNT")]},
        "FROM {{ ref('CORE', 'A_STG_ORDERS') }} \"O\" " + ON_CUSTOMER,
    )  # fmt: skip
    specs = _order_specs(ON_CUSTOMER, FACT_LINEAGE, FACT)[:-1]  # the fact is built here from the staging
    graph = LineageGraph([*specs, stg, fact])
    assert reference_key(graph, "core/fct_orders", "SEGMENT") == ["CUST_ID"]
    # A band derived from the key has one root too: the key is the column named as the join's.
    banded = {**FACT, "CUST_BAND": NUM}
    graph = _orders(ON_CUSTOMER, {**FACT_LINEAGE, "CUST_BAND": [("raw/orders", "CUST_ID")]}, banded)
    assert reference_key(graph, "core/fct_orders", "SEGMENT") == ["CUST_ID"]


def test_a_table_looked_up_twice_or_by_its_current_version_gives_no_key():
    ship = (
        ON_CUSTOMER
        + ' INNER JOIN {{ ref(\'REF\', \'CUSTOMERS\') }} "S" ON "O"."SHIP_CUST_ID" = "S"."CUST_ID"'
    )
    both = {**FACT, "SHIP_CUST_ID": NUM}
    graph = _orders(ship, {**FACT_LINEAGE, "SHIP_CUST_ID": [("raw/orders", "SHIP_CUST_ID")]}, both)
    assert reference_key(graph, "core/fct_orders", "SEGMENT") == []
    current = ON_CUSTOMER + ' AND "C"."IS_CURRENT" = TRUE'
    assert reference_key(_orders(current, FACT_LINEAGE, FACT), "core/fct_orders", "SEGMENT") == []
    assert reference_key(_orders(ON_CUSTOMER, FACT_LINEAGE, FACT), "core/fct_orders", "SEGMENT") == [
        "CUST_ID"
    ]


def _nights(maps: dict[int, dict[str, tuple[str, float]]]) -> dict[date, Recorded]:
    """Nights ``d`` days before tonight -> {key: (value, units)}, as the series records them."""
    return {
        DAY - timedelta(days=d): Recorded(
            business_date=DAY - timedelta(days=d), value=1000,
            groups={f"ORDER_ID={k}, STATUS={v}": u for k, (v, u) in m.items()},
        )
        for d, m in maps.items()
    }  # fmt: skip


def test_a_lifecycle_a_sparse_key_a_default_member_and_a_zero_total_are_no_re_pointing():
    held = {d: {"7": ("OPEN", 300.0), "8": ("OPEN", 200.0)} for d in (1, 2, 3)}
    tonight = {"ORDER_ID=7, STATUS=SHIPPED": 300.0, "ORDER_ID=8, STATUS=OPEN": 200.0}
    (moved,) = repointed("STATUS", DAY, tonight, _nights(held), 500)
    assert (moved.key, moved.before, moved.after) == ("ORDER_ID=7", "OPEN", "SHIPPED")
    # Two other orders went OPEN -> SHIPPED before: a lifecycle, not a re-pointing.
    earlier = {
        **held,
        4: {"5": ("SHIPPED", 100.0), "6": ("SHIPPED", 90.0)},
        5: {"5": ("OPEN", 100.0), "6": ("OPEN", 90.0)},
    }
    assert repointed("STATUS", DAY, tonight, _nights(earlier), 500) == []
    # Its last nights with rows weeks ago: nothing says when it changed.
    sparse = {d: {"7": ("OPEN", 300.0)} for d in (20, 40, 60)}
    assert repointed("STATUS", DAY, tonight, _nights(sparse), 500) == []
    # Away from the value the NULL key holds (a default member a late key leaves).
    unknown = {d: {"7": ("UNKNOWN", 300.0), "None": ("UNKNOWN", 5.0)} for d in (1, 2, 3)}
    assert repointed("STATUS", DAY, tonight, _nights(unknown), 500) == []
    # A total of nothing (a balanced journal): no share to read, and no error.
    assert repointed("STATUS", DAY, tonight, _nights(held), 0.0) == []


def test_a_join_hung_off_the_reference_and_a_filter_on_a_unique_lookup():
    # The customers' region looked up by a second join from the customers: the segment's key is still the
    # customer's, not the region's.
    regions = node_spec("ref/regions", "DB.REF.REGIONS", {"REGION_ID": NUM, "REGION": TEXT})
    join = (
        ON_CUSTOMER + ' INNER JOIN {{ ref(\'REF\', \'REGIONS\') }} "R" ON "C"."REGION_ID" = "R"."REGION_ID"'
    )
    specs = _order_specs(join, FACT_LINEAGE, FACT)
    specs[1] = node_spec(
        "ref/customers", "DB.REF.CUSTOMERS", {"CUST_ID": NUM, "SEGMENT": TEXT, "REGION_ID": NUM}
    )
    # The fact reads the regions in its join (no column of theirs kept): one of its inputs.
    specs[-1] = node_spec("core/fct_orders", "DB.CORE.FCT_ORDERS", FACT, FACT_LINEAGE,
                          "FROM {{ ref('RAW', 'ORDERS') }} \"O\" " + join, reads=("ref/regions",))  # fmt: skip
    assert reference_key(LineageGraph([*specs, regions]), "core/fct_orders", "SEGMENT") == ["CUST_ID"]
    # A filter on a lookup that declares its key unique keeps its one row per key: still read by that key.
    unique = node_spec(
        "ref/customers", "DB.REF.CUSTOMERS", {"CUST_ID": NUM, "SEGMENT": TEXT, "IS_CURRENT": "BOOLEAN"}
    )
    schema = unique.metadata["dagster/column_schema"]
    columns = [dg.TableColumn(c.name, c.type, constraints=dg.TableColumnConstraints(unique=c.name == "CUST_ID"))
               for c in schema.columns]  # fmt: skip
    unique = unique.replace_attributes(
        metadata={**unique.metadata, "dagster/column_schema": dg.TableSchema(columns=columns)}
    )
    current = _order_specs(ON_CUSTOMER + ' AND "C"."IS_CURRENT" = TRUE', FACT_LINEAGE, FACT)
    current[1] = unique
    assert reference_key(LineageGraph(current), "core/fct_orders", "SEGMENT") == ["CUST_ID"]


def test_one_earlier_move_is_no_lifecycle():
    held = {d: {"7": ("OPEN", 300.0), "8": ("OPEN", 200.0)} for d in (1, 2, 3)}
    tonight = {"ORDER_ID=7, STATUS=SHIPPED": 300.0, "ORDER_ID=8, STATUS=OPEN": 200.0}
    # One other order went OPEN -> SHIPPED once (a re-pointing of its own, or its fix): not yet a lifecycle.
    once = {**held, 4: {"5": ("SHIPPED", 100.0)}, 5: {"5": ("OPEN", 100.0)}}
    (moved,) = repointed("STATUS", DAY, tonight, _nights(once), 500)
    assert moved.key == "ORDER_ID=7"
    # Two orders moved so on a night an incident flagged (a re-pointing found then): no lifecycle either.
    twice = {
        **held,
        4: {"5": ("SHIPPED", 100.0), "6": ("SHIPPED", 90.0)},
        5: {"5": ("OPEN", 100.0), "6": ("OPEN", 90.0)},
    }
    flagged = {
        d: r.model_copy(update={"flagged": d == DAY - timedelta(days=4)}) for d, r in _nights(twice).items()
    }
    assert [m.key for m in repointed("STATUS", DAY, tonight, flagged, 500)] == ["ORDER_ID=7"]
    assert repointed("STATUS", DAY, tonight, _nights(twice), 500) == []
