"""Rows that went missing from a fact are told apart by where they went: a feed that delivered nothing tonight
though its record says it loads every night (stale input, whatever the input's age), rows the sources
delivered that a join dropped on NULL keys (value loss, named by the source subset whose keys arrive NULL),
or rows the source never received (volume loss). Judged against the sources' recorded rows, not the fact's
own count. A staging node unions a main source with a partner's feed (other columns, other names), and the
fact inner-joins it to a reference of accounts. Two shapes: parcel scans from the hubs and a partner
carrier's zones joined to shipper accounts; card payments from the regions' acquirer and a partner
acquirer's zones joined to merchant accounts. On DuckDB under fakesnow, with the histories the checks
record."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, time, timedelta

import pytest
from diagnosis_db import diagnosis_db, node_spec

from dw_dagster.checks.history import HistorySession, Reading, group_rows_series, input_load_series
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.diagnosis import diagnose
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.records.incidents import CauseClass, Finding, Incident
from dw_dagster.warehouse.ops import OpsSchema

TONIGHT = date(2026, 9, 29)

# name: main source (table, time, load column, subset column, values, key, measure), partner source (the
# same), reference (table, key), fact's (group column, key, measure)
SHAPES = {
    "parcels": (("HUB_SCANS", "SCANNED_AT", "_INGESTED_AT", "HUB", ["LIS", "OPO", "FAO", "BRG", "CBR"],
                 "SHIPPER_ID", "WEIGHT_KG"),
                ("CARRIER_SCANS", "EVENT_TS", "FILE_AT", "ZONE", ["Z1", "Z2"], "SHIPPER_REF", "WEIGHT"),
                ("SHIPPERS", "SHIPPER_ID"), ("AREA", "SHIPPER_ID", "KG")),
    "payments": (("ACQ_PAYMENTS", "PAID_AT", "_SYNCED_AT", "REGION", ["NORTH", "SOUTH", "EAST", "WEST"],
                  "MERCHANT_ID", "AMOUNT"),
                 ("PARTNER_PAYMENTS", "TXN_TIME", "RECEIVED_AT", "PARTNER_ZONE", ["ISLES", "OVERSEAS"],
                  "MERCHANT_NO", "AMT"),
                 ("MERCHANTS", "MERCHANT_ID"), ("MARKET", "MERCHANT_ID", "GROSS")),
}  # fmt: skip
ROWS = 8
"""Rows per subset value a night."""


class World:
    def __init__(self, conn, shape):
        main, partner, (ref, ref_key), (group, key, measure) = shape
        self.main, self.partner, self.conn = main, partner, conn
        self.group, self.key, self.measure = group, key, measure
        self.m_key, self.p_key = f"raw/{main[0].lower()}", f"partner/{partner[0].lower()}"
        r_key = f"ref/{ref.lower()}"
        self.asset = "core/fct"
        types = {}
        for src in (main, partner):
            t, at, load, sub, _, k, m = src
            types[t] = {at: "TIMESTAMP_NTZ", load: "TIMESTAMP_NTZ", sub: "VARCHAR", k: "NUMBER(38,0)",
                        m: "NUMBER(12,2)"}  # fmt: skip
        union = (
            f"FROM (SELECT \"{main[3]}\" AS \"{group}\", \"{main[5]}\" AS \"{key}\", \"{main[6]}\" AS \"{measure}\","
            f" \"{main[1]}\" AS \"AT\" FROM {{{{ ref('RAW', '{main[0]}') }}}}\n"
            f"UNION ALL SELECT \"{partner[3]}\", \"{partner[5]}\", \"{partner[6]}\", \"{partner[1]}\""
            f" FROM {{{{ ref('PARTNER', '{partner[0]}') }}}}) \"U\"\n"
            f"WHERE CAST(\"U\".\"AT\" AS DATE) = (SELECT MAX(CAST(\"{main[1]}\" AS DATE)) FROM {{{{ ref('RAW', '{main[0]}') }}}})"
        )  # fmt: skip
        fact_join = (
            "FROM {{ ref('STAGING', 'STG') }} \"S\"\n"
            f'INNER JOIN {{{{ ref(\'REF\', \'{ref}\') }}}} "R" ON "S"."{key}" = "R"."{ref_key}"'
        )
        stg_types = {group: "VARCHAR", key: "NUMBER(38,0)", measure: "NUMBER(12,2)"}
        both = lambda i: [(self.m_key, main[i]), (self.p_key, partner[i])]  # noqa: E731
        graph = LineageGraph([
            node_spec(self.m_key, f"DB.RAW.{main[0]}", types[main[0]]),
            node_spec(self.p_key, f"DB.PARTNER.{partner[0]}", types[partner[0]]),
            node_spec(r_key, f"DB.REF.{ref}", {ref_key: "NUMBER(38,0)", "NAME": "VARCHAR"}),
            node_spec("staging/stg", "DB.STAGING.STG", stg_types, {group: both(3), key: both(5), measure: both(6)},
                  union),
            node_spec(self.asset, "DB.CORE.FCT", stg_types,
                  {group: [("staging/stg", group)], key: [("staging/stg", key)],
                   measure: [("staging/stg", measure)]}, fact_join),
        ])  # fmt: skip
        cur = conn.cursor()
        for schema, t in (("RAW", main[0]), ("PARTNER", partner[0])):
            cols = ", ".join(f'"{c}" {ty}' for c, ty in types[t].items())
            cur.execute(f'CREATE TABLE "DB"."{schema}"."{t}" ({cols})')
        cur.execute(f'CREATE TABLE "DB"."REF"."{ref}" ("{ref_key}" NUMBER(38,0), "NAME" VARCHAR)')
        cur.execute(f'INSERT INTO "DB"."REF"."{ref}" VALUES {", ".join(f"({k}, ?)" for k in range(1, 31))}',
                    tuple(f"account {k}" for k in range(1, 31)))  # fmt: skip
        for t in ("STAGING.STG", "CORE.FCT"):
            cols = ", ".join(f'"{c}" {ty}' for c, ty in stg_types.items())
            cur.execute(
                f'CREATE TABLE "DB".{".".join(f"{chr(34)}{p}{chr(34)}" for p in t.split("."))} ({cols})'
            )
        rule = {"asset": self.asset, "column": "AT"}
        totals = [
            {"name": f"{n}_{s[6].lower()}", "owner": "ops", "asset": a, "group_keys": [s[3]], "hurts": "down",
             "sql": f"SELECT \"{s[3]}\", SUM(\"{s[6]}\") AS \"VALUE\", COUNT(*) AS \"ROWS\" FROM {{{{ ref('{sch}', '{s[0]}') }}}}"
                    f" WHERE CAST(\"{s[1]}\" AS DATE) = (SELECT MAX(CAST(\"{s[1]}\" AS DATE)) FROM {{{{ ref('{sch}', '{s[0]}') }}}})"
                    " GROUP BY 1"}
            for n, s, a, sch in (("main", main, self.m_key, "RAW"), ("partner", partner, self.p_key, "PARTNER"))
        ]  # fmt: skip
        self.total = f"fact_{measure.lower()}"
        totals.append({"name": self.total, "owner": "ops", "asset": self.asset, "group_keys": [group],
                       "hurts": "down", "sql": f"SELECT \"{group}\", SUM(\"{measure}\") AS \"VALUE\", COUNT(*) AS"
                       f" \"ROWS\" FROM {{{{ ref('CORE', 'FCT') }}}} GROUP BY 1"})  # fmt: skip
        metrics = MetricsFile.model_validate({
            "business_day": {"timezone": "UTC", "cutoff_hour": 6},
            "totals": totals,
            "freshness": {"inputs": [{**rule, "input": self.m_key, "input_column": main[2]},
                                     {**rule, "input": self.p_key, "input_column": partner[2]}]},
        })  # fmt: skip
        self.ctx = DiagnosisContext(graph, metrics, lambda loc, name: f'"DB"."{loc}"."{name}"',
                                    HistorySession(conn, OpsSchema("DB")), cur)  # fmt: skip
        self.rng = random.Random(5)

    def _rows(self, src, day: date, lag_minutes: int, fault: str | None, subset: str | None) -> list[tuple]:
        t, at, load, sub, values, k, m = src
        rows = []
        for v in values:
            for i in range(ROWS):
                if fault == "lost" and v == subset:
                    continue  # the subset's rows never arrive
                when = datetime.combine(day, time(1 + 2 * i + self.rng.randrange(2), self.rng.randrange(60)))
                key = None if fault == "null_key" and v == subset else self.rng.randint(1, 30)
                amount = round(self.rng.uniform(10, 90), 2)
                rows.append((when, when + timedelta(minutes=lag_minutes), v, key, amount))
        return rows

    @staticmethod
    def _readings(name: str, column: str, rows: list[tuple]) -> dict[str, Reading]:
        """The total's groups (``COLUMN=value``) and their rows, as the check records them."""
        groups: dict[str, float] = {}
        counted: dict[str, float] = {}
        for value, amount in rows:
            g = f"{column}={value}"
            groups[g] = groups.get(g, 0.0) + amount
            counted[g] = counted.get(g, 0.0) + 1
        return {
            name: Reading(value=sum(groups.values()), groups=groups),
            group_rows_series(name): Reading(value=sum(counted.values()), groups=counted),
        }

    def diagnose(self, fault: str, implied: bool = False):
        """Eight nights, the last with ``fault``: 'stall' (the partner's feed delivers nothing), 'null_key'
        (one main subset's keys arrive NULL), 'lost' (one main subset's rows never arrive). ``implied``: the
        finding is the reconciliation the lineage implies with the two inputs' totals (checks/implied.py)."""
        main, partner, cur = self.main, self.partner, self.conn.cursor()
        subset = main[4][2]
        nights: dict[date, dict[str, Reading]] = {}
        # The inputs' latest loads, as the input-freshness check records them: four weeks of every night.
        latest: dict[str, float] = {}
        for k in range(28, -1, -1):
            day = TONIGHT - timedelta(days=k)
            for key, minutes in ((self.m_key, 30), (self.p_key, 80)):
                if not (fault == "stall" and key == self.p_key and day == TONIGHT):
                    latest[key] = (
                        datetime.combine(day, time(23, 59), UTC) + timedelta(minutes=minutes)
                    ).timestamp()
                nights.setdefault(day, {})[input_load_series(key)] = Reading(value=latest[key])
        loaded: dict[tuple[str, str], list[tuple]] = {}
        last_p: list[tuple] = []
        for k in range(7, -1, -1):
            day = TONIGHT - timedelta(days=k)
            now = day == TONIGHT
            m_rows = self._rows(main, day, 30, fault if now else None, subset)
            p_rows = [] if now and fault == "stall" else self._rows(partner, day, 80, None, None)
            loaded.setdefault(("RAW", main[0]), []).extend(m_rows)
            loaded.setdefault(("PARTNER", partner[0]), []).extend(p_rows)
            union = [(r[2], r[3], r[4]) for r in (*m_rows, *p_rows)]
            kept = [r for r in union if r[1] is not None]
            nights[day] |= {
                **self._readings(f"main_{main[6].lower()}", main[3], [(r[2], r[4]) for r in m_rows]),
                # The partner's total reads its own latest day: yesterday's rows again on the night it stalls.
                **self._readings(f"partner_{partner[6].lower()}", partner[3], [(r[2], r[4]) for r in p_rows or last_p]),
                **self._readings(self.total, self.group, [(g, a) for g, _, a in kept]),
            }  # fmt: skip
            last_p = p_rows or last_p
            if now:
                loaded[("STAGING", "STG")], loaded[("CORE", "FCT")] = union, kept
                dropped = sum(a for _, _, a in union) - sum(a for _, _, a in kept)
        for (schema, t), rows in loaded.items():
            marks = ", ".join([f"({', '.join('?' * len(rows[0]))})"] * len(rows))
            cur.execute(
                f'INSERT INTO "DB"."{schema}"."{t}" VALUES {marks}', tuple(v for r in rows for v in r)
            )
        for day, readings in nights.items():
            self.ctx.history.record_night(day, readings, None, None)  # type: ignore[union-attr]
        built = datetime.combine(TONIGHT + timedelta(days=1), time(1, 30), UTC)
        finding = Finding(check_name=f"total_{self.total}", asset_key=self.asset, business_date=TONIGHT,
                          summary=f"{self.total} fell", cause_scope="job:x",
                          evidence={"baseline": {"expected": 1.0}, "built_at": built.isoformat()})  # fmt: skip
        if implied:
            sources = [f"main_{main[6].lower()}", f"partner_{partner[6].lower()}"]
            finding.evidence["reconciliation"] = {
                "inferred": True, "source": sources[0], "sources": sources, "passed": False,
                "gap_change": dropped, "tolerance": 0.01 * dropped, "groups": []}  # fmt: skip
        now = datetime.now(UTC)
        incident = Incident(incident_id="INC-1", cause_key="k", status="open", business_date=TONIGHT, title="t",
                            severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip
        return diagnose(incident, [finding], self.ctx)


@pytest.fixture(params=SHAPES)
def world(request):
    with diagnosis_db("RAW", "PARTNER", "REF", "STAGING", "CORE") as conn:
        yield World(conn, SHAPES[request.param])


def test_a_feed_that_delivered_nothing_tonight_is_stale_input_whatever_its_age(world):
    """The partner's groups went to nothing; its latest load is about 24 h old at the build (within the
    rule's 26 h) but did not advance, though it advanced on every night on record."""
    d = world.diagnose("stall")
    assert d.classification is CauseClass.STALE_INPUT, d.cause
    assert d.cause_asset == world.p_key
    assert "nothing new since the night before" in d.cause, d.cause


@pytest.mark.parametrize("implied", [False, True], ids=["total", "implied_reconciliation"])
def test_rows_a_join_dropped_on_null_keys_are_value_loss_on_the_source_subset(world, implied):
    """One main subset's keys arrive NULL: the source's rows held, the fact kept fewer of them than on any
    good night, and the inner join drops them. Named in the source's own column, not the fact's group, whether
    the total's own check or the reconciliation the lineage implies with its inputs' totals found it."""
    d = world.diagnose("null_key", implied)
    assert d.classification is CauseClass.VALUE_LOSS, d.cause
    main = world.main
    assert f"{main[3]}={main[4][2]}" in [k.label for k in d.keys], d.cause
    assert d.keys[0].rows == ROWS
    assert d.cause_asset == world.m_key


def test_rows_the_source_never_received_stay_volume_loss(world):
    """One main subset's rows never arrive: the fact kept its share of what the sources delivered, and no
    input stalled."""
    d = world.diagnose("lost")
    assert d.classification is CauseClass.VOLUME_LOSS, d.cause
    assert world.main[4][2] in [k.value for k in d.keys], d.cause
