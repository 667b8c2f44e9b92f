"""A total that sums a distinct count (people per group, counted by an aggregate node) falls because a join
upstream drops a key's rows: the key's units are its people, as the total counts them, not the sum of their
ids (a meaningless number that then decides which join explains the fall). Two shapes: clinic visits joined to
their clinics (patients), and store receipts joined to their stores (customers); one reference row deleted.
On DuckDB under fakesnow."""

from __future__ import annotations

from datetime import date

import dagster as dg
import pytest
from diagnosis_db import diagnose_total_fall, diagnosis_db, node_spec

from dw_dagster.checks.metrics import RecordedTotal
from dw_dagster.coalesce.transforms import read_transform
from dw_dagster.context.lineage import LineageGraph

TONIGHT = date(2026, 4, 14)

# name: (fact, reference, key, group, person, mart column, {key: (group, people, rows each)}, deleted key)
SHAPES = {
    "clinics": ("VISITS", "CLINICS", "CLINIC_ID", "REGION", "PATIENT_ID", "PATIENTS",
                {"C1": ("North", 40, 3), "C2": ("South", 35, 2), "C3": ("South", 12, 4)}, "C3"),
    "stores": ("RECEIPTS", "STORES", "STORE_ID", "DISTRICT", "CUSTOMER_ID", "CUSTOMERS",
               {"S1": ("Harbour", 60, 2), "S2": ("Hills", 25, 5), "S3": ("Hills", 30, 2)}, "S2"),
}  # fmt: skip


@pytest.mark.parametrize("shape", SHAPES)
def test_a_join_that_drops_a_keys_rows_loses_its_people_not_the_sum_of_their_ids(shape):
    fact, ref, key, group, person, people, units, deleted = SHAPES[shape]
    fact_k, ref_k = f"raw/{fact.lower()}", f"ref/{ref.lower()}"
    join = (f"FROM {{{{ ref('RAW', '{fact}') }}}} \"F\"\n"
            f"INNER JOIN {{{{ ref('REF', '{ref}') }}}} \"R\" ON \"F\".\"{key}\" = \"R\".\"{key}\"")  # fmt: skip
    count = f'COUNT(DISTINCT "FCT"."{person}")'
    mart = node_spec("mart/agg", "DB.MART.AGG", {group: "VARCHAR", people: "NUMBER(38,0)"},
                     {group: [("core/fct", group)], people: [("core/fct", person)]},
                     f"FROM {{{{ ref('CORE', 'FCT') }}}} \"FCT\" GROUP BY \"FCT\".\"{group}\"")  # fmt: skip
    mart = mart.merge_attributes(
        metadata={
            "coalesce/column_transforms": dg.MetadataValue.json({people: read_transform(count).as_json()})
        }
    )
    graph = LineageGraph([
        node_spec(fact_k, f"DB.RAW.{fact}", {key: "VARCHAR", person: "NUMBER(38,0)"}),
        node_spec(ref_k, f"DB.REF.{ref}", {key: "VARCHAR", group: "VARCHAR"}),
        node_spec("core/fct", "DB.CORE.FCT", {key: "VARCHAR", group: "VARCHAR", person: "NUMBER(38,0)"},
                  {key: [(fact_k, key)], group: [(ref_k, group)], person: [(fact_k, person)]}, join),
        mart,
    ])  # fmt: skip
    with diagnosis_db("RAW", "REF", "CORE", "MART") as conn:
        cur = conn.cursor()
        cur.execute(f'CREATE TABLE "DB"."RAW"."{fact}" ({key} VARCHAR, {person} NUMBER(38,0))')
        cur.execute(f'CREATE TABLE "DB"."REF"."{ref}" ({key} VARCHAR, {group} VARCHAR)')
        # Ids in the hundreds of thousands, each person seen several times: a sum of ids is no count.
        rows = [(k, 100_000 * (i + 1) + p) for i, (k, (_, n, times)) in enumerate(units.items())
                for p in range(n) for _ in range(times)]  # fmt: skip
        cur.executemany(f'INSERT INTO "DB"."RAW"."{fact}" VALUES (?, ?)', rows)
        cur.executemany(
            f'INSERT INTO "DB"."REF"."{ref}" VALUES (?, ?)',
            [(k, g) for k, (g, _, _) in units.items() if k != deleted],
        )
        cur.execute(f'CREATE TABLE "DB"."CORE"."FCT" AS SELECT "F"."{key}", "R"."{group}", "F"."{person}" '
                    f'FROM "DB"."RAW"."{fact}" "F" INNER JOIN "DB"."REF"."{ref}" "R" ON "F"."{key}" = "R"."{key}"')  # fmt: skip
        cur.execute(f'CREATE TABLE "DB"."MART"."AGG" AS SELECT "FCT"."{group}", {count} AS "{people}" '
                    f'FROM "DB"."CORE"."FCT" "FCT" GROUP BY "FCT"."{group}"')  # fmt: skip
        total = RecordedTotal(name=people.lower(), owner="ops", asset="mart/agg",
                              sql=f"SELECT SUM(\"{people}\") AS \"VALUE\" FROM {{{{ ref('MART', 'AGG') }}}}")  # fmt: skip
        lost = units[deleted][1]
        d = diagnose_total_fall(conn, graph, total, TONIGHT, float(lost))
        # The query shown beside the cause counts them as the diagnosis did.
        proof = conn.cursor()
        proof.execute(d.test_query if d is not None else "SELECT 1")
        shown = proof.fetchall()
    assert d is not None, "no join or filter explained the fall"
    (gap,) = d.keys
    assert gap.label == f"{key}={deleted}" and gap.units == lost, (gap.label, gap.units)
    assert d.joins[0].dropped_units == lost
    assert [(row[0], row[2]) for row in shown] == [(deleted, lost)]
