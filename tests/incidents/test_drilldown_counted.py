"""The drill-down of a total that sums a distinct count (people per group, counted by an aggregate node)
measures each subset of its source rows in that count, as the total counts them: a sum of the counted ids is
no number of anything, and its per-row average moves with whichever ids arrived, which read as a unit change
of the ids. Two shapes: clinic visits counted as patients per region, store receipts as customers per
district, each key's people numbered in a range of their own (thousands at one clinic, millions at
another). On DuckDB under fakesnow, with the total's history as the checks record it."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import dagster as dg
import pandas as pd
import pytest
from diagnosis_db import diagnosis_db, node_spec
from snowflake.connector import pandas_tools

from dw_dagster.checks.history import HistorySession, Reading, group_rows_series, volume_series
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.coalesce.transforms import read_transform
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.diagnosis import diagnose
from dw_dagster.incidents.drilldown import drill_source
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.records.incidents import CauseClass, Finding, Incident
from dw_dagster.warehouse.ops import OpsSchema

TONIGHT = date(2026, 5, 12)
NIGHTS = [TONIGHT - timedelta(days=d) for d in range(1, 8)]

# name: (fact, key, group, person, mart column, time, {key: (group, people, rows each, first id)})
SHAPES = {
    "clinics": ("VISITS", "CLINIC_ID", "REGION", "PATIENT_ID", "PATIENTS", "VISITED_AT",
                {"C1": ("North", 40, 3, 1_000), "C2": ("North", 35, 2, 5_000_000), "C3": ("South", 30, 4, 20_000),
                 "C4": ("South", 25, 2, 900_000)}),
    "stores": ("RECEIPTS", "STORE_ID", "DISTRICT", "CUSTOMER_ID", "CUSTOMERS", "SOLD_AT",
               {"S1": ("Harbour", 60, 2, 10), "S2": ("Hills", 20, 2, 7_000_000), "S3": ("Hills", 30, 2, 400),
                "S4": ("Harbour", 45, 3, 250_000), "S5": ("Hills", 40, 3, 3_000)}),
}  # fmt: skip


class World:
    """A fact of visits selected by day, and an aggregate node counting each group's distinct people, which the
    total sums per group."""

    def __init__(self, conn, shape):
        fact, key, group, person, people, time, self.units = shape
        self.fact, self.key, self.group, self.time = fact, key, group, time
        self.person, self.people, self.conn = person, people, conn
        fact_k = f"raw/{fact.lower()}"
        self.count = f'COUNT(DISTINCT "FCT"."{person}")'
        select = (f"FROM {{{{ ref('RAW', '{fact}') }}}} \"F\" WHERE CAST(\"F\".\"{time}\" AS DATE) = "
                  f"(SELECT MAX(CAST(\"{time}\" AS DATE)) FROM {{{{ ref('RAW', '{fact}') }}}})")  # fmt: skip
        mart = node_spec("mart/agg", "DB.MART.AGG", {group: "VARCHAR", people: "NUMBER(38,0)"},
                         {group: [("core/fct", group)], people: [("core/fct", person)]},
                         f"FROM {{{{ ref('CORE', 'FCT') }}}} \"FCT\" GROUP BY \"FCT\".\"{group}\"")  # fmt: skip
        mart = mart.merge_attributes(metadata={
            "coalesce/column_transforms": dg.MetadataValue.json({people: read_transform(self.count).as_json()})})  # fmt: skip
        cols = {"LINE_ID": "NUMBER(38,0)", key: "VARCHAR", group: "VARCHAR", person: "NUMBER(38,0)",
                time: "TIMESTAMP_NTZ"}  # fmt: skip
        self.graph = LineageGraph([
            node_spec(fact_k, f"DB.RAW.{fact}", cols),
            node_spec("core/fct", "DB.CORE.FCT", {key: "VARCHAR", group: "VARCHAR", person: "NUMBER(38,0)"},
                      {key: [(fact_k, key)], group: [(fact_k, group)], person: [(fact_k, person)]}, select),
            mart,
        ])  # fmt: skip
        self.name = f"{people.lower()}_by_{group.lower()}"
        metrics = MetricsFile.model_validate({"totals": [{
            "name": self.name, "owner": "ops", "asset": "mart/agg", "group_keys": [group], "hurts": "down",
            "sql": f"SELECT \"{group}\", SUM(\"{people}\") AS \"VALUE\" FROM {{{{ ref('MART', 'AGG') }}}} GROUP BY 1"}]})  # fmt: skip
        cur = conn.cursor()
        cur.execute(f'CREATE TABLE "DB"."RAW"."{fact}" ({", ".join(f"{c} {t}" for c, t in cols.items())})')
        self.ctx = DiagnosisContext(self.graph, metrics, lambda loc, name: f'"DB"."{loc}"."{name}"',
                                    HistorySession(conn, OpsSchema("DB")), cur)  # fmt: skip

    def load(self, kept: dict[str, float], rekeyed: str | None = None):
        """Seven ordinary nights and tonight, each person's visits a row each; tonight ``kept``: a key's share
        of its people that arrived (with all their visits), ``rekeyed``: a key whose rows each carry an id of
        their own (a visit's number posted where the person's was)."""
        rows, line = [], 0
        for day in [TONIGHT, *NIGHTS]:
            people: dict[str, set] = {}
            counts: dict[str, float] = {}
            for k, (g, n, times, first) in self.units.items():
                share = kept.get(k, 1.0) if day == TONIGHT else 1.0
                visits = [(first + p, t) for p in range(n) for t in range(times)]
                for pid, t in visits[: round(len(visits) * share)]:
                    line += 1
                    if day == TONIGHT and k == rekeyed:
                        pid = first + n + line
                    rows.append((line, k, g, pid, datetime(day.year, day.month, day.day, 8 + t, line % 60)))
                    people.setdefault(f"{self.group}={g}", set()).add(pid)
                    counts[f"{self.group}={g}"] = counts.get(f"{self.group}={g}", 0) + 1
            groups = {g: float(len(p)) for g, p in people.items()}
            self.ctx.history.record_night(day, {
                self.name: Reading(value=sum(groups.values()), groups=groups),
                group_rows_series(self.name): Reading(value=sum(counts.values()), groups=counts),
                volume_series("mart/agg"): Reading(value=float(len(groups))),
            }, None, None)  # fmt: skip
        frame = pd.DataFrame(rows, columns=["LINE_ID", self.key, self.group, self.person, self.time])
        pandas_tools.write_pandas(self.conn, frame, self.fact, database="DB", schema="RAW")
        cur, g, t = self.conn.cursor(), self.group, self.time
        cur.execute(f'CREATE TABLE "DB"."CORE"."FCT" AS SELECT "{self.key}", "{g}", "{self.person}" FROM '
                    f'"DB"."RAW"."{self.fact}" WHERE CAST("{t}" AS DATE) = \'{TONIGHT.isoformat()}\'')  # fmt: skip
        cur.execute(f'CREATE TABLE "DB"."MART"."AGG" AS SELECT "FCT"."{g}", {self.count} AS "{self.people}" '
                    f'FROM "DB"."CORE"."FCT" "FCT" GROUP BY 1')  # fmt: skip

    def diagnose(self):
        now = datetime.now(UTC)
        incident = Incident(incident_id="INC-1", cause_key="k", status="open", business_date=TONIGHT, title="t",
                            severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip
        finding = Finding(check_name=f"total_{self.name}", asset_key="mart/agg", business_date=TONIGHT,
                          summary="fell", cause_scope="job:x")  # fmt: skip
        return diagnose(incident, [finding], self.ctx)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_key_whose_rows_went_missing_is_a_volume_loss_not_a_unit_change_of_the_counted_ids(shape):
    """Most of one key's people did not arrive tonight. Summed, its region's ids averaged a third of their
    usual (the key numbers its people in the millions, the others in the thousands) while the other region
    held: a unit change of the ids. Counted, the region's people per row held, and the key is what fell."""
    with diagnosis_db("RAW", "CORE", "MART") as conn:
        w = World(conn, SHAPES[shape])
        lost = list(w.units)[1]
        w.load({lost: 0.3})
        drill = drill_source(w.ctx, w.ctx.metrics.totals[0], TONIGHT, NIGHTS, [w.group])
        d = w.diagnose()
    assert drill.moved is None, drill.moved
    assert d.classification is CauseClass.VOLUME_LOSS, d.cause
    assert [k.label for k in d.keys] == [f"{w.key}={lost}"], d.cause


@pytest.mark.parametrize("shape", SHAPES)
def test_a_subset_that_moved_is_measured_in_the_people_it_counts(shape):
    """One key's rows each carry an id of their own tonight (a visit's number where the person's was): its
    people per row doubled or more while the other keys' held. The subset's numbers are its people (its
    usual and tonight's), not the sum of their ids, and the query shown counts them."""
    with diagnosis_db("RAW", "CORE", "MART") as conn:
        w = World(conn, SHAPES[shape])
        key = list(w.units)[0]
        _, people, times, _ = w.units[key]
        w.load({}, rekeyed=key)
        d = w.diagnose()
        proof = conn.cursor()
        proof.execute(d.test_query or "SELECT 1")
        shown = {row[0]: row[1:] for row in proof.fetchall()}
    assert d.classification is CauseClass.UNIT_CHANGE, d.cause
    assert [k.label for k in d.keys] == [f"{w.key}={key}"], d.cause
    assert (d.evidence["subset_before"], d.evidence["subset_after"]) == (people, people * times)
    assert d.keys[0].units == people * times - people
    # Over the table's eight nights: the key's rows, and its people (seven nights' repeats, tonight's ids).
    assert shown[key] == (8 * people * times, people + people * times)
