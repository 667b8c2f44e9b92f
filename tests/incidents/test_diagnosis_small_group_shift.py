"""A small group that lost all its value to another group moves few points of the total's share (2 here),
yet it is the shift: the diagnosis traces the groups the check judged moved, each against its own history,
not the groups past a fixed share of the total. Two shapes: order lines whose store is mapped to a sales
channel (the kiosk's one store pointed at the web), meter readings whose meter is mapped to a region (the
islands' one meter pointed at the north). On DuckDB under fakesnow, with the total's history as the checks
record it."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import dagster as dg
import pytest
from diagnosis_db import diagnosis_db

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.diagnosis import diagnose
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.records.incidents import CauseClass, Finding, Incident
from dw_dagster.warehouse.ops import OpsSchema

TONIGHT = date(2026, 5, 20)

# name: (fact source, reference, fact node, key, group, measure, {key: (group, units)}, the key remapped, to)
SHAPES = {
    "orders": ("ORDER_LINES", "STORES", "FCT_SALES", "STORE_ID", "CHANNEL", "AMOUNT",
               {"S1": ("web", 300), "S2": ("web", 250), "S3": ("app", 150), "S4": ("app", 120),
                "S5": ("store", 100), "S6": ("kiosk", 20)}, "S6", "web"),
    "meters": ("READINGS", "METERS", "FCT_USAGE", "METER_ID", "REGION", "KWH",
               {"M1": ("North", 800), "M2": ("North", 700), "M3": ("South", 900), "M4": ("East", 400),
                "M5": ("West", 350), "M6": ("Islands", 60)}, "M6", "North"),
}  # fmt: skip


def _spec(key, table, types, lineage=None, join=None) -> dg.AssetSpec:
    metadata = {
        "dagster/table_name": table,
        "dagster/column_schema": dg.TableSchema(columns=[dg.TableColumn(c, t) for c, t in types.items()]),
        "coalesce/node_type": "Fact" if join else "Source",
    }
    if lineage:
        metadata["dagster/column_lineage"] = dg.TableColumnLineage(
            deps_by_column={c: [dg.TableColumnDep(asset_key=dg.AssetKey.from_user_string(k), column_name=n)]
                            for c, (k, n) in lineage.items()}
        )  # fmt: skip
        metadata["coalesce/join"] = join
    deps = sorted({k for k, _ in (lineage or {}).values()})
    return dg.AssetSpec(key, kinds={"coalesce"}, deps=deps, metadata=metadata)


class World:
    def __init__(self, conn, shape):
        fact, ref, node, key, group, measure, self.units, self.remapped, self.to = shape
        self.key, self.group, self.measure, self.conn = key, group, measure, conn
        self.fact_t, self.ref_t, self.node_t = (f'"DB"."{s}"."{t}"' for s, t in (("RAW", fact), ("REF", ref), ("CORE", node)))  # fmt: skip
        self.join = (f"FROM {{{{ ref('RAW', '{fact}') }}}} \"F\"\n"
                     f"INNER JOIN {{{{ ref('REF', '{ref}') }}}} \"R\" ON \"F\".\"{key}\" = \"R\".\"{key}\"")  # fmt: skip
        graph = LineageGraph([
            _spec(f"raw/{fact.lower()}", f"DB.RAW.{fact}", {key: "VARCHAR", measure: "NUMBER(38,0)"}),
            _spec(f"ref/{ref.lower()}", f"DB.REF.{ref}", {key: "VARCHAR", group: "VARCHAR"}),
            _spec(f"core/{node.lower()}", f"DB.CORE.{node}", {key: "VARCHAR", group: "VARCHAR", measure: "NUMBER(38,0)"},
                  {key: (f"raw/{fact.lower()}", key), group: (f"ref/{ref.lower()}", group),
                   measure: (f"raw/{fact.lower()}", measure)}, self.join),
        ])  # fmt: skip
        self.name = f"{measure.lower()}_by_{group.lower()}"
        metrics = MetricsFile.model_validate({"totals": [{
            "name": self.name, "owner": "bi", "asset": f"core/{node.lower()}", "group_keys": [group],
            "sql": f"SELECT \"{group}\", SUM(\"{measure}\") AS \"VALUE\" FROM {{{{ ref('CORE', '{node}') }}}} GROUP BY 1"}]})  # fmt: skip
        self.asset = f"core/{node.lower()}"
        cur = conn.cursor()
        cur.execute(f"CREATE TABLE {self.fact_t} ({key} VARCHAR, {measure} NUMBER(38,0))")
        cur.execute(f"CREATE TABLE {self.ref_t} ({key} VARCHAR, {group} VARCHAR)")
        for k, (_, u) in self.units.items():
            cur.execute(f"INSERT INTO {self.fact_t} VALUES (?, ?)", (k, u))
        self.ctx = DiagnosisContext(graph, metrics, lambda loc, name: f'"DB"."{loc}"."{name}"',
                                    HistorySession(conn, OpsSchema("DB")), cur)  # fmt: skip

    def build(self, mapping: dict[str, str]) -> dict[str, float]:
        """The reference rows, the fact rebuilt through its join, and the total's groups as recorded."""
        cur = self.conn.cursor()
        cur.execute(f"DELETE FROM {self.ref_t}")
        for k, g in mapping.items():
            cur.execute(f"INSERT INTO {self.ref_t} VALUES (?, ?)", (k, g))
        k, g, m = self.key, self.group, self.measure
        cur.execute(f'CREATE OR REPLACE TABLE {self.node_t} AS SELECT "F"."{k}", "R"."{g}", "F"."{m}" '
                    f'FROM {self.fact_t} "F" INNER JOIN {self.ref_t} "R" ON "F"."{k}" = "R"."{k}"')  # fmt: skip
        cur.execute(f'SELECT "{g}", SUM("{m}") FROM {self.node_t} GROUP BY 1')
        return {f"{g}={grp}": float(v) for grp, v in cur.fetchall()}

    def nights(self) -> tuple[dict[str, float], dict[str, float]]:
        usual = self.build({k: g for k, (g, _) in self.units.items()})
        for d in range(1, 8):
            self.ctx.history.record_metric(self.name, TONIGHT - timedelta(days=d), sum(usual.values()), usual, None, None)  # fmt: skip
        tonight = self.build({k: (self.to if k == self.remapped else g) for k, (g, _) in self.units.items()})
        self.ctx.history.record_metric(self.name, TONIGHT, sum(tonight.values()), tonight, None, None)
        return usual, tonight

    def finding(self, evidence: dict) -> Finding:
        return Finding(check_name=f"total_{self.name}", asset_key=self.asset, business_date=TONIGHT,
                       summary="a group went to nothing", cause_scope="job:x", evidence=evidence)  # fmt: skip


@pytest.fixture(params=SHAPES)
def world(request):
    with diagnosis_db("RAW", "REF", "CORE") as conn:
        yield World(conn, SHAPES[request.param])


def _incident() -> Incident:
    now = datetime.now(UTC)
    return Incident(incident_id="INC-1", cause_key="k", status="open", business_date=TONIGHT, title="t",
                    severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip


def _assert_remapped(d, w: World, gone: str) -> None:
    assert d.classification is CauseClass.REFERENCE_DATA_CHANGE, d.cause
    (key,) = d.keys
    assert key.label == f"{w.key}={w.remapped}" and key.units == w.units[w.remapped][1]
    # Tonight's mapping shows the group it went to; the group it came from only by its units.
    assert (
        f"now maps it to {w.group}={w.to}; its {key.units:,.0f} units tonight are about what {w.group}={gone} lost"
        in (key.change or "")
    )


def test_a_small_group_the_check_judged_gone_is_traced_to_the_row_that_moved_it(world):
    w = world
    usual, tonight = w.nights()
    gone = w.units[w.remapped][0]
    share = usual[f"{w.group}={gone}"] / sum(usual.values())
    assert share < 0.03, "a move of a few share points: below any fixed floor of 5"
    # The check judged the small group gone against its own history; the large group that took it held
    # within its own noise.
    judged = [{"group": f"{w.group}={gone}", "value": 0.0, "expected": usual[f"{w.group}={gone}"],
               "change": -usual[f"{w.group}={gone}"], "share_before": share, "share_after": 0.0, "status": "went"}]  # fmt: skip
    d = diagnose(
        _incident(),
        [w.finding({"groups_moved": judged, "baseline": {"expected": sum(usual.values())}})],
        w.ctx,
    )
    _assert_remapped(d, w, gone)


def test_with_no_group_judged_a_small_group_is_judged_against_its_own_shares(world):
    w = world
    usual, _ = w.nights()
    # No judged move in the finding (a finding raised on the total alone): the groups' own shares on the
    # good nights judge them.
    d = diagnose(_incident(), [w.finding({"baseline": {"expected": sum(usual.values())}})], w.ctx)
    _assert_remapped(d, w, w.units[w.remapped][0])
