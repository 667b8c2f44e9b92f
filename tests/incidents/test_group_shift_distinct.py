"""A shift between groups of a total that sums a distinct count (people per group, counted by an aggregate
node): a key's units are its own distinct count, not a sum of the counted ids (meaningless) nor its rows.
Two shapes: clinic visits whose clinic is mapped to a region (patients per region), and store receipts
whose store is mapped to a district (customers per district); each person comes back several times, and one
small key is pointed at another group. An aggregate that does not split by key (a MAX) is not traced per
key, and the trail says so. On DuckDB under fakesnow, with the total's history as the checks record it."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import dagster as dg
import pytest
from diagnosis_db import diagnosis_db, node_spec

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.coalesce.transforms import read_transform
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.diagnosis import diagnose
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.records.incidents import CauseClass, Finding, Incident
from dw_dagster.warehouse.ops import OpsSchema

TONIGHT = date(2026, 3, 11)

# name: (fact, reference, key, group, person, mart column, {key: (group, people, visits each)}, remapped, to)
SHAPES = {
    "clinics": ("VISITS", "CLINICS", "CLINIC_ID", "REGION", "PATIENT_ID", "PATIENTS",
                {"C1": ("North", 40, 3), "C2": ("North", 35, 2), "C3": ("South", 50, 4), "C4": ("South", 30, 2),
                 "C5": ("East", 45, 3), "C6": ("Islands", 6, 5)}, "C6", "North"),
    "stores": ("RECEIPTS", "STORES", "STORE_ID", "DISTRICT", "CUSTOMER_ID", "CUSTOMERS",
               {"S1": ("Harbour", 60, 2), "S2": ("Harbour", 55, 3), "S3": ("Hills", 70, 2),
                "S4": ("Old Town", 25, 4), "S5": ("Old Town", 30, 2), "S6": ("Airport", 8, 6)}, "S6", "Hills"),
}  # fmt: skip


class World:
    def __init__(self, conn, shape, aggregate: str = "COUNT(DISTINCT {})"):
        fact, ref, key, group, person, people, self.units, self.remapped, self.to = shape
        self.key, self.group, self.conn = key, group, conn
        self.fact_t, self.ref_t = f'"DB"."RAW"."{fact}"', f'"DB"."REF"."{ref}"'
        self.node_t, self.mart_t = '"DB"."CORE"."FCT"', '"DB"."MART"."AGG"'
        join = (f"FROM {{{{ ref('RAW', '{fact}') }}}} \"F\"\n"
                f"INNER JOIN {{{{ ref('REF', '{ref}') }}}} \"R\" ON \"F\".\"{key}\" = \"R\".\"{key}\"")  # fmt: skip
        self.count = aggregate.format(f'"FCT"."{person}"')
        agg_join = f'FROM {{{{ ref(\'CORE\', \'FCT\') }}}} "FCT" GROUP BY "FCT"."{group}"'
        fact_k, ref_k = f"raw/{fact.lower()}", f"ref/{ref.lower()}"
        mart = node_spec("mart/agg", "DB.MART.AGG", {group: "VARCHAR", people: "NUMBER(38,0)"},
                         {group: [("core/fct", group)], people: [("core/fct", person)]}, agg_join)  # fmt: skip
        transforms = {people: read_transform(self.count).as_json()}
        mart = mart.merge_attributes(
            metadata={"coalesce/column_transforms": dg.MetadataValue.json(transforms)}
        )
        self.ctx_graph = LineageGraph([
            node_spec(fact_k, f"DB.RAW.{fact}", {"SEQ": "NUMBER(38,0)", key: "VARCHAR", person: "NUMBER(38,0)"}),
            node_spec(ref_k, f"DB.REF.{ref}", {key: "VARCHAR", group: "VARCHAR"}),
            node_spec("core/fct", "DB.CORE.FCT", {key: "VARCHAR", group: "VARCHAR", person: "NUMBER(38,0)"},
                      {key: [(fact_k, key)], group: [(ref_k, group)], person: [(fact_k, person)]}, join),
            mart,
        ])  # fmt: skip
        self.person, self.people = person, people
        self.name = f"{people.lower()}_by_{group.lower()}"
        metrics = MetricsFile.model_validate({"totals": [{
            "name": self.name, "owner": "ops", "asset": "mart/agg", "group_keys": [group],
            "sql": f"SELECT \"{group}\", SUM(\"{people}\") AS \"VALUE\" FROM {{{{ ref('MART', 'AGG') }}}} GROUP BY 1"}]})  # fmt: skip
        cur = conn.cursor()
        cur.execute(f"CREATE TABLE {self.fact_t} (SEQ NUMBER(38,0), {key} VARCHAR, {person} NUMBER(38,0))")
        cur.execute(f"CREATE TABLE {self.ref_t} ({key} VARCHAR, {group} VARCHAR)")
        # Each key's people have ids of their own (large numbers: a sum of them is no count), each seen
        # several times (each visit a row of its own).
        rows = [
            (k, 100_000 * (i + 1) + p)
            for i, (k, (_, n, times)) in enumerate(self.units.items())
            for p in range(n)
            for _ in range(times)
        ]
        cur.executemany(
            f"INSERT INTO {self.fact_t} VALUES (?, ?, ?)", [(i, k, p) for i, (k, p) in enumerate(rows)]
        )
        self.ctx = DiagnosisContext(self.ctx_graph, metrics, lambda loc, name: f'"DB"."{loc}"."{name}"',
                                    HistorySession(conn, OpsSchema("DB")), cur)  # fmt: skip

    def build(self, mapping: dict[str, str]) -> dict[str, float]:
        """The reference rows, the fact and the aggregate rebuilt, and the total's groups as recorded."""
        cur = self.conn.cursor()
        cur.execute(f"DELETE FROM {self.ref_t}")
        cur.executemany(f"INSERT INTO {self.ref_t} VALUES (?, ?)", list(mapping.items()))
        k, g, p = self.key, self.group, self.person
        cur.execute(f'CREATE OR REPLACE TABLE {self.node_t} AS SELECT "F"."{k}", "R"."{g}", "F"."{p}" '
                    f'FROM {self.fact_t} "F" INNER JOIN {self.ref_t} "R" ON "F"."{k}" = "R"."{k}"')  # fmt: skip
        cur.execute(f'CREATE OR REPLACE TABLE {self.mart_t} AS SELECT "FCT"."{g}", {self.count} AS "{self.people}" '
                    f'FROM {self.node_t} "FCT" GROUP BY "FCT"."{g}"')  # fmt: skip
        cur.execute(f'SELECT "{g}", SUM("{self.people}") FROM {self.mart_t} GROUP BY 1')
        return {f"{g}={grp}": float(v) for grp, v in cur.fetchall()}

    def nights(self) -> dict[str, float]:
        usual = self.build({k: g for k, (g, _, _) in self.units.items()})
        for d in range(1, 8):
            self.ctx.history.record_metric(self.name, TONIGHT - timedelta(days=d), sum(usual.values()), usual, None, None)  # fmt: skip
        tonight = self.build(
            {k: (self.to if k == self.remapped else g) for k, (g, _, _) in self.units.items()}
        )
        self.ctx.history.record_metric(self.name, TONIGHT, sum(tonight.values()), tonight, None, None)
        return usual

    def diagnose(self, usual: dict[str, float]):
        gone = f"{self.group}={self.units[self.remapped][0]}"
        share = usual[gone] / sum(usual.values())
        judged = [{"group": gone, "value": 0.0, "expected": usual[gone], "change": -usual[gone],
                   "share_before": share, "share_after": 0.0, "status": "went"}]  # fmt: skip
        finding = Finding(check_name=f"total_{self.name}", asset_key="mart/agg", business_date=TONIGHT,
                          summary="a group went to nothing", cause_scope="job:x",
                          evidence={"groups_moved": judged, "baseline": {"expected": sum(usual.values())}})  # fmt: skip
        now = datetime.now(UTC)
        incident = Incident(incident_id="INC-1", cause_key="k", status="open", business_date=TONIGHT, title="t",
                            severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip
        return diagnose(incident, [finding], self.ctx)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_distinct_count_is_measured_per_key_by_its_own_count(shape):
    with diagnosis_db("RAW", "REF", "CORE", "MART") as conn:
        w = World(conn, SHAPES[shape])
        d = w.diagnose(w.nights())
    assert d.classification is CauseClass.REFERENCE_DATA_CHANGE, d.cause
    (key,) = d.keys
    people = w.units[w.remapped][1]
    # The key's units are its people (not the sum of their ids, nor their visits).
    assert key.label == f"{w.key}={w.remapped}" and key.units == people
    assert f"now maps it to {w.group}={w.to}; its {people:,} units tonight" in (key.change or "")


@pytest.mark.parametrize("shape", SHAPES)
def test_an_aggregate_that_does_not_split_by_key_is_not_traced_per_key(shape):
    with diagnosis_db("RAW", "REF", "CORE", "MART") as conn:
        w = World(conn, SHAPES[shape], aggregate="MAX({})")
        d = w.diagnose(w.nights())
    assert not d.keys or all(k.label != f"{w.key}={w.remapped}" for k in d.keys), d.cause
    assert any("a MAX of core/fct's rows" in n and "not measured per key" in n for n in d.notes), d.notes
