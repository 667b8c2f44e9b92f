"""A join key re-pointed upstream, and a loss read by shares. Two shapes, on DuckDB under fakesnow:

- sessions -> subscribers (their plan id) -> plans (their segment), both joins in the fact's node; a
  total of megabytes by region;
- order lines -> a store dimension built from stores (their district id) and districts (their manager),
  the fact joining the dimension; a total of amounts by channel.

The fact carries the numeric key the second lookup joins on (PLAN_ID, DISTRICT_ID). When the rows that
hold it move from one key to another (the CRM moving a plan's subscribers to another plan), the old key
leaves tonight's rows and the new one carries its own units plus the moved ones: no lookup row moved, no
single subscriber carries the move. The key is measured as an attribute (``attributes.py``) and the key
that lost is named, with the table whose rows changed. And a group whose rows went, the others' units
holding, is a loss: the others' shares rose, but no group gained in units, so it is no shift."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from diagnosis_db import diagnosis_db, node_spec

from dw_dagster.checks.attributes import MAX_VALUES, attribute_part, attribute_series, carried_attributes
from dw_dagster.checks.history import HistorySession, Recorded
from dw_dagster.checks.metrics import MetricsFile, RecordedTotal
from dw_dagster.coalesce.sql import resolve_refs
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.incidents.group_shift import (
    attribute_shift_diagnosis,
    judged_groups,
    moved_groups,
    trace_shift,
)
from dw_dagster.records.incidents import CauseClass, Finding, Incident
from dw_dagster.warehouse.ops import OpsSchema

TONIGHT = date(2026, 5, 20)
NUM, TEXT = "NUMBER(38,0)", "VARCHAR"


class Shape:
    """A fact whose rows take a key from a first lookup and a text attribute, by that key, from a second."""

    def __init__(self, *, fact, items, keys, fact_node, item, key, attr, group, measure, dim_node=None):
        self.item, self.key, self.attr, self.group, self.measure = item, key, attr, group, measure
        self.items_t, self.keys_t = f'"DB"."REF"."{items}"', f'"DB"."REF"."{keys}"'
        self.fact_t, self.node_t = f'"DB"."RAW"."{fact}"', f'"DB"."CORE"."{fact_node}"'
        raw, ref_items, ref_keys = f"raw/{fact.lower()}", f"ref/{items.lower()}", f"ref/{keys.lower()}"
        self.key_source, self.node = ref_items, f"core/{fact_node.lower()}"
        specs = [
            node_spec(raw, f"DB.RAW.{fact}", {item: NUM, group: TEXT, measure: NUM}),
            node_spec(ref_items, f"DB.REF.{items}", {item: NUM, key: NUM}),
            node_spec(ref_keys, f"DB.REF.{keys}", {key: NUM, attr: TEXT, "PRICE": "NUMBER(8,2)"}),
        ]
        fact_ref = f"{{{{ ref('RAW', '{fact}') }}}}"
        items_ref, keys_ref = f"{{{{ ref('REF', '{items}') }}}}", f"{{{{ ref('REF', '{keys}') }}}}"
        if dim_node is None:  # both lookups in the fact's own node
            self.join = (
                f'FROM {fact_ref} "F" INNER JOIN {items_ref} "I" ON "F"."{item}" = "I"."{item}"'
                f' INNER JOIN {keys_ref} "K" ON "I"."{key}" = "K"."{key}"'
            )
            self.sql = self.join.replace(fact_ref, self.fact_t).replace(items_ref, self.items_t)
            self.sql = self.sql.replace(keys_ref, self.keys_t)
            self.select = (
                f'"F"."{item}", "F"."{group}", "I"."{key}", "K"."{attr}", "K"."PRICE", "F"."{measure}"'
            )
            via = {key: [(ref_items, key)], attr: [(ref_keys, attr)], "PRICE": [(ref_keys, "PRICE")]}
        else:  # a dimension built from the two lookups, the fact joining it
            dim, dim_t = f"core/{dim_node.lower()}", f'"DB"."CORE"."{dim_node}"'
            dim_join = f'FROM {items_ref} "I" INNER JOIN {keys_ref} "K" ON "I"."{key}" = "K"."{key}"'
            dim_ref = f"{{{{ ref('CORE', '{dim_node}') }}}}"
            specs.append(
                node_spec(dim, f"DB.CORE.{dim_node}", {item: NUM, key: NUM, attr: TEXT, "PRICE": "NUMBER(8,2)"},
                          {item: [(ref_items, item)], key: [(ref_items, key)], attr: [(ref_keys, attr)],
                           "PRICE": [(ref_keys, "PRICE")]}, dim_join)
            )  # fmt: skip
            self.dim_sql = (
                f'CREATE OR REPLACE TABLE {dim_t} AS SELECT "I"."{item}", "I"."{key}", "K"."{attr}", "K"."PRICE" '
                + dim_join.replace(items_ref, self.items_t).replace(keys_ref, self.keys_t)
            )
            self.join = f'FROM {fact_ref} "F" INNER JOIN {dim_ref} "D" ON "F"."{item}" = "D"."{item}"'
            self.sql = self.join.replace(fact_ref, self.fact_t).replace(dim_ref, dim_t)
            self.select = (
                f'"F"."{item}", "F"."{group}", "D"."{key}", "D"."{attr}", "D"."PRICE", "F"."{measure}"'
            )
            via = {key: [(dim, key)], attr: [(dim, attr)], "PRICE": [(dim, "PRICE")]}
        specs.append(
            node_spec(self.node, f"DB.CORE.{fact_node}",
                      {item: NUM, group: TEXT, key: NUM, attr: TEXT, "PRICE": "NUMBER(8,2)", measure: NUM},
                      {item: [(raw, item)], group: [(raw, group)], measure: [(raw, measure)], **via}, self.join)
        )  # fmt: skip
        self.graph = LineageGraph(specs)
        self.dim_node = dim_node
        self.total = RecordedTotal.model_validate(
            {"name": f"{measure.lower()}_by_{group.lower()}", "owner": "bi", "asset": self.node,
             "group_keys": [group],
             "sql": f'SELECT "{group}", SUM("{measure}") AS "VALUE" FROM {{{{ ref(\'CORE\', \'{fact_node}\') }}}} GROUP BY 1'}
        )  # fmt: skip


SHAPES = {
    "plans": dict(fact="SESSIONS", items="SUBSCRIBERS", keys="PLANS", fact_node="FCT_USAGE", item="SUBSCRIBER_ID",
                  key="PLAN_ID", attr="SEGMENT", group="REGION", measure="MB"),
    "districts": dict(fact="ORDER_LINES", items="STORES", keys="DISTRICTS", fact_node="FCT_SALES",
                      item="STORE_ID", key="DISTRICT_ID", attr="MANAGER", group="CHANNEL", measure="AMOUNT",
                      dim_node="DIM_STORE"),
}  # fmt: skip
# Items: (item, group, units, key). Key 15 (items 4-6) is re-pointed to key 11 tonight: 60 units, no single
# item of key 11 near that (none of 60 +- 1%).
ITEMS = [(1, "N", 100, 11), (2, "S", 80, 11), (3, "N", 45, 12), (4, "S", 10, 15), (5, "N", 20, 15),
         (6, "S", 30, 15), (7, "N", 70, 12)]  # fmt: skip
KEYS = [(11, "PREPAID", 2.0), (12, "POSTPAID", 1.0), (15, "BUSINESS", 0.4)]


def _resolve(location: str, name: str) -> str:
    return f'"DB"."{location}"."{name}"'


@pytest.fixture(params=SHAPES)
def world(request):
    shape = Shape(**SHAPES[request.param])
    with diagnosis_db("RAW", "REF", "CORE") as conn:
        cur = conn.cursor()
        s = shape
        cur.execute(
            f"CREATE TABLE {s.fact_t} ({s.item} NUMBER(38,0), {s.group} VARCHAR, {s.measure} NUMBER(38,0))"
        )
        cur.execute(f"CREATE TABLE {s.items_t} ({s.item} NUMBER(38,0), {s.key} NUMBER(38,0))")
        cur.execute(f"CREATE TABLE {s.keys_t} ({s.key} NUMBER(38,0), {s.attr} VARCHAR, PRICE NUMBER(8,2))")
        for item, grp, units, _ in ITEMS:
            cur.execute(f"INSERT INTO {s.fact_t} VALUES (?, ?, ?)", (item, grp, units))
        metrics = MetricsFile.model_validate({"totals": [s.total.model_dump()]})
        s.ctx = DiagnosisContext(s.graph, metrics, _resolve, HistorySession(conn, OpsSchema("DB")), cur)
        yield s


def _build(s: Shape, items: dict[int, int], keys=KEYS) -> None:
    """The lookups' rows tonight and the nodes rebuilt as Coalesce would."""
    cur = s.ctx.cursor
    cur.execute(f"DELETE FROM {s.items_t}")
    for item, key in items.items():
        cur.execute(f"INSERT INTO {s.items_t} VALUES (?, ?)", (item, key))
    cur.execute(f"DELETE FROM {s.keys_t}")
    for row in keys:
        cur.execute(f"INSERT INTO {s.keys_t} VALUES (?, ?, ?)", row)
    if s.dim_node:
        cur.execute(s.dim_sql)
    cur.execute(f"CREATE OR REPLACE TABLE {s.node_t} AS SELECT {s.select} {s.sql}")


def _measure(s: Shape, column: str) -> dict[str, float]:
    """The total's aggregate grouped by ``column``, as the night's statement measures an attribute."""
    part = attribute_part(s.total, resolve_refs(s.total.sql, _resolve), column)
    assert part is not None
    s.ctx.cursor.execute(part.query.sql(dialect="snowflake"))
    return {f"{column}={v}": float(x) for v, x in s.ctx.cursor.fetchall()}


def _record(s: Shape, series: str, day: date, groups: dict[str, float]) -> Recorded:
    s.ctx.history.record_metric(series, day, sum(groups.values()), groups, None, None)
    return Recorded(business_date=day, value=sum(groups.values()), groups=groups)


def _incident() -> Incident:
    now = datetime.now(UTC)
    return Incident(incident_id="INC-1", cause_key="k", status="open", business_date=TONIGHT, title="t",
                    severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip


USUAL = {item: key for item, _, _, key in ITEMS}
REPOINTED = {item: (11 if key == 15 else key) for item, key in USUAL.items()}


def test_a_join_key_carried_from_a_lookup_is_an_attribute_judged_first_and_read_as_text(world):
    s = world
    # The key the second lookup joins on, then the text attribute; not the price (a number no join
    # equates), not the fact's own item key (read from the measure's table).
    assert carried_attributes(s.graph, s.total, [s.measure]) == [s.key, s.attr]
    _build(s, USUAL)
    assert _measure(s, s.key) == {f"{s.key}=11": 180, f"{s.key}=12": 115, f"{s.key}=15": 60}


def test_a_key_of_more_values_than_judged_reads_one_beyond_the_cap(world):
    s = world
    many = [(100 + i, "N", 1, 1000 + i) for i in range(MAX_VALUES + 9)]
    for item, grp, units, _ in many:
        s.ctx.cursor.execute(f"INSERT INTO {s.fact_t} VALUES (?, ?, ?)", (item, grp, units))
    _build(s, {**USUAL, **{i: k for i, _, _, k in many}}, [*KEYS, *((k, "X", 1.0) for *_, k in many)])
    assert len(_measure(s, s.key)) == MAX_VALUES + 1


def test_a_key_re_pointed_upstream_is_named_with_the_table_whose_rows_moved(world):
    s = world
    series = attribute_series(s.total.name, s.key)
    _build(s, USUAL)
    usual = _measure(s, s.key)
    for d in range(1, 8):
        _record(s, series, TONIGHT - timedelta(days=d), usual)
    # The lookups' rows move tonight: key 15's items now carry key 11.
    _build(s, REPOINTED)
    tonight = _measure(s, s.key)
    assert tonight == {f"{s.key}=11": 240, f"{s.key}=12": 115}
    _record(s, series, TONIGHT, tonight)
    moves = [{"group": f"{s.key}=15", "status": "went"}, {"group": f"{s.key}=11", "status": "gained"}]
    finding = Finding(check_name=f"total_{s.total.name}", asset_key=s.node, business_date=TONIGHT,
                      summary="a shift between groups", cause_scope="job:x",
                      evidence={"attribute_shift": {"column": s.key, "series": series, "moves": moves}})  # fmt: skip
    d = attribute_shift_diagnosis(_incident(), finding, s.total, s.ctx)
    assert d is not None and d.classification is CauseClass.REFERENCE_DATA_CHANGE, d
    (key,) = d.keys
    assert key.label == f"{s.key}=15" and key.units == 60
    assert f"went to {s.key}=11" in (key.change or "") and f"0 rows of {s.items_t} hold it" in (
        key.change or ""
    )
    assert d.cause_asset == s.key_source and d.path[0] == s.key_source


def test_a_group_whose_rows_went_while_the_others_units_held_is_no_shift(world):
    # Key 15's lookup row is deleted: its items drop out of the fact (an inner join). Its segment went; the
    # others' shares rose with it, their units held. A loss, left to the loss's own evidence.
    s = world
    _build(s, USUAL)
    cur = s.ctx.cursor
    cur.execute(f'SELECT "{s.attr}", SUM("{s.measure}") FROM {s.node_t} GROUP BY 1')
    usual = {f"{s.attr}={g}": float(v) for g, v in cur.fetchall()}
    nights = [
        Recorded(business_date=TONIGHT - timedelta(days=d), value=355, groups=usual) for d in range(1, 8)
    ]
    _build(s, USUAL, KEYS[:2])
    cur.execute(f'SELECT "{s.attr}", SUM("{s.measure}") FROM {s.node_t} GROUP BY 1')
    groups = {f"{s.attr}={g}": float(v) for g, v in cur.fetchall()}
    assert groups == {f"{s.attr}=PREPAID": 180, f"{s.attr}=POSTPAID": 115}
    tonight = Recorded(business_date=TONIGHT, value=295, groups=groups)
    by = s.total.model_copy(update={"group_keys": [s.attr]})
    judged = judged_groups([{"group": f"{s.attr}=BUSINESS", "status": "went"}], None, lambda: nights, tonight)
    assert moved_groups(tonight, nights[0], judged) is None
    assert trace_shift(s.ctx, by, tonight, nights[0], judged) is None
