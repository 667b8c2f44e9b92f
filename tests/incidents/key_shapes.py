"""Two shapes of a fact whose rows take a key from a first lookup and a text attribute, by that key, from a
second, on DuckDB under fakesnow (``diagnosis_db``): sessions -> subscribers (their plan id) -> plans (their
segment), both joins in the fact's node; order lines -> a store dimension built from stores (their district
id) and districts (their manager), the fact joining the dimension. Shared by the tests of a key re-pointed
upstream and of a reference row re-pointed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from diagnosis_db import diagnosis_db, node_spec

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.metrics import MetricsFile, RecordedTotal
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.warehouse.ops import OpsSchema

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
        self.specs, self.graph = specs, LineageGraph(specs)
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


def resolve(location: str, name: str) -> str:
    return f'"DB"."{location}"."{name}"'


@contextmanager
def open_world(name: str) -> Iterator[Shape]:
    """The shape ``name``'s tables created, the fact's rows inserted, its diagnosis context on them."""
    shape = Shape(**SHAPES[name])
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
        s.ctx = DiagnosisContext(s.graph, metrics, resolve, HistorySession(conn, OpsSchema("DB")), cur)
        yield s


def build(s: Shape, items: dict[int, int], keys=KEYS) -> None:
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
