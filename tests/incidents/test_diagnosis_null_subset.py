"""A NULL-valued group is traced back through column lineage to the source column the NULLs arrive in and the
source subset whose rows hold them: value loss on that subset's key, however the total groups. A measure
column arriving NULL for one store (alone in its region) is the store, not the region the total groups by; a
lookup's key arriving NULL on one channel's rows (the rate join then finds nothing, and the total's group
by that key is NULL-keyed and NULL-valued, new tonight) is that channel. Two shapes: order lines priced in a
currency joined to its rate, with stores in regions; meter readings joined to their tariff, with meters on
feeders. On DuckDB under fakesnow, with the totals' histories as the checks record them."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta

import pytest
from diagnosis_db import asset_spec as _spec
from diagnosis_db import diagnosis_db

from dw_dagster.checks.history import HistorySession, group_rows_series
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.diagnosis import diagnose
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.records.incidents import CauseClass, Finding, Incident
from dw_dagster.warehouse.ops import OpsSchema

TONIGHT = date(2026, 7, 8)

# name: source (table, time, subset column and its values, kind column and its values, key column and values,
#       quantity, price), reference (table, rate), grouping (table, group column, subset value -> group),
#       fact table, the subset whose price arrives NULL, the kind whose key arrives NULL
SHAPES = {
    "orders": (("ORDER_LINES", "ORDERED_AT", "STORE_ID", ["S1", "S2", "S3", "S4", "S5", "S6"],
                "CHANNEL", ["web", "app", "phone"], "CCY", ["AUD", "USD", "EUR"], "QTY", "UNIT_PRICE"),
               ("FX_RATES", "AUD_PER_UNIT", {"AUD": 1.0, "USD": 1.5, "EUR": 1.6}),
               ("STORES", "REGION", {"S1": "North", "S2": "North", "S3": "South", "S4": "South",
                                     "S5": "West", "S6": "East"}),
               "FCT_SALES", "S5", "phone"),
    "meters": (("READINGS", "READ_AT", "METER_ID", ["M1", "M2", "M3", "M4", "M5", "M6", "M7"],
                "READ_TYPE", ["smart", "manual", "estimated"], "TARIFF", ["T1", "T2", "T3"], "KWH",
                "LOSS_FACTOR"),
               ("TARIFFS", "PENCE_PER_KWH", {"T1": 24.5, "T2": 31.0, "T3": 12.0}),
               ("METERS", "FEEDER", {"M1": "F1", "M2": "F1", "M3": "F2", "M4": "F2", "M5": "F9",
                                     "M6": "F3", "M7": "F3"}),
               "FCT_USAGE", "M5", "manual"),
}  # fmt: skip


class World:
    """A source selected by business day, a rate lookup joined on a key, a grouping of the subset column;
    the fact's value is quantity x price x rate, a NULL if any of them is."""

    def __init__(self, conn, shape):
        source, (ref, rate, self.rates), (grp, group, self.groups), fact, self.nulled_subset, self.nulled_kind = shape  # fmt: skip
        (src, self.time, self.sub, self.subs, self.kind, self.kinds, self.key, self.keys, self.qty, self.price) = source  # fmt: skip
        self.rate, self.group, self.conn = rate, group, conn
        self.src_t = f'"DB"."RAW"."{src}"'
        s, r, g = (f"raw/{src.lower()}", f"ref/{ref.lower()}", f"ref/{grp.lower()}")
        self.src = s
        join = (f"FROM {{{{ ref('RAW', '{src}') }}}} \"S\"\n"
                f"LEFT JOIN {{{{ ref('REF', '{ref}') }}}} \"R\" ON \"S\".\"{self.key}\" = \"R\".\"{self.key}\"\n"
                f"LEFT JOIN {{{{ ref('REF', '{grp}') }}}} \"G\" ON \"S\".\"{self.sub}\" = \"G\".\"{self.sub}\"\n"
                f"WHERE CAST(\"S\".\"{self.time}\" AS DATE) = "
                f"(SELECT MAX(CAST(\"{self.time}\" AS DATE)) FROM {{{{ ref('RAW', '{src}') }}}})")  # fmt: skip
        graph = LineageGraph([
            _spec(s, f"DB.RAW.{src}", {self.time: "TIMESTAMP_NTZ", self.sub: "VARCHAR", self.kind: "VARCHAR",
                                       self.key: "VARCHAR", self.qty: "NUMBER(12,0)", self.price: "NUMBER(12,2)"}),
            _spec(r, f"DB.REF.{ref}", {self.key: "VARCHAR", rate: "NUMBER(12,4)"}),
            _spec(g, f"DB.REF.{grp}", {self.sub: "VARCHAR", group: "VARCHAR"}),
            _spec(f"core/{fact.lower()}", f"DB.CORE.{fact}",
                  {self.sub: "VARCHAR", self.key: "VARCHAR", group: "VARCHAR", "VALUE": "NUMBER(16,2)"},
                  {self.sub: [(s, self.sub)], self.key: [(s, self.key)], group: [(g, group)],
                   "VALUE": [(s, self.qty), (s, self.price), (r, rate)]}, join),
        ])  # fmt: skip
        self.asset = f"core/{fact.lower()}"
        self.conn = conn
        cur = conn.cursor()
        cur.execute(
            f'CREATE TABLE {self.src_t} ("{self.time}" TIMESTAMP_NTZ, "{self.sub}" VARCHAR, "{self.kind}" VARCHAR,'
            f' "{self.key}" VARCHAR, "{self.qty}" NUMBER(12,0), "{self.price}" NUMBER(12,2))'
        )
        self.ctx = DiagnosisContext(graph, MetricsFile.model_validate({"totals": []}),
                                    lambda loc, name: f'"DB"."{loc}"."{name}"',
                                    HistorySession(conn, OpsSchema("DB")), cur)  # fmt: skip
        self.rng = random.Random(7)

    def total(self, by: str, *also: str) -> str:
        """The total by ``by`` (and totals named ``also`` over the same rows); its name."""
        name = f"value_by_{by.lower()}"
        self.ctx.metrics = MetricsFile.model_validate({"totals": [{
            "name": n, "owner": "finance", "asset": self.asset, "group_keys": [by], "hurts": "down",
            "sql": f"SELECT \"{by}\", SUM(\"VALUE\") AS \"VALUE\", COUNT(*) AS \"ROWS\" FROM {{{{ ref('CORE', '{self.asset.split('/')[1].upper()}') }}}} GROUP BY 1",
        } for n in (name, *also)]})  # fmt: skip
        return name

    def night(self, day: date, nulled: str | None = None) -> list[tuple]:
        """The night's source rows (four per subset and kind); ``nulled``: 'price' for the subset's prices,
        'key' for the kind's keys."""
        rows = []
        for sub in self.subs:
            for kind in self.kinds:
                for i in range(4):
                    at = datetime(day.year, day.month, day.day, 8 + i, self.rng.randrange(60))
                    key = self.rng.choice(self.keys)
                    price = round(self.rng.uniform(5, 60), 2)
                    if nulled == "price" and self.nulled_subset in (None, sub):
                        price = None
                    if nulled == "key" and kind == self.nulled_kind:
                        key = None
                    rows.append((at, sub, kind, key, self.rng.randint(1, 9), price))
        self.conn.cursor().execute(
            f"INSERT INTO {self.src_t} VALUES {', '.join('(?, ?, ?, ?, ?, ?)' for _ in rows)}",
            tuple(v for r in rows for v in r),
        )
        return rows

    def record(self, name: str, by: str, day: date, rows: list[tuple], so_far: dict | None = None) -> None:
        """The total's groups as the check records them: a group with any NULL value is NULL-valued only
        when all its rows are (SUM skips NULLs), and its rows by group. ``so_far``: a to-date total, the
        nights before added (updated in place)."""
        values: dict[str, list[float | None]] = {}
        for _, sub, _, key, qty, price in rows:
            group = self.groups[sub] if by == self.group else key
            rate = self.rates.get(key) if key is not None else None
            value = qty * price * rate if price is not None and rate is not None else None
            values.setdefault(f"{by}={group}", []).append(value)
        groups = {g: (sum(x for x in v if x is not None) if any(x is not None for x in v) else None)
                  for g, v in values.items()}  # fmt: skip
        if so_far is not None:
            for g, v in groups.items():
                so_far[g] = None if v is None else (so_far.get(g) or 0.0) + v
            groups = dict(so_far)
        total = sum(v for v in groups.values() if v is not None)
        self.ctx.history.record_metric(name, day, total, groups, None, None)  # type: ignore[union-attr]
        counted = {g: float(len(v)) for g, v in values.items()}
        self.ctx.history.record_metric(group_rows_series(name), day, sum(counted.values()), counted, None, None)  # type: ignore[union-attr]  # fmt: skip

    def diagnose(self, name: str, by: str, nulled: str, lag: int = 0, to_date: str | None = None):
        """``lag``: the run after the business day's cutoff builds the source's day before (each business
        date's rows are stamped ``lag`` days before it). ``to_date``: a to-date total over the same rows,
        its finding first."""
        so_far: dict = {}
        for k in range(7, -1, -1):
            day = TONIGHT - timedelta(days=k)
            rows = self.night(day - timedelta(days=lag), nulled if day == TONIGHT else None)
            self.record(name, by, day, rows)
            if to_date:
                self.record(to_date, by, day, rows, so_far)
        tonight = self.ctx.history.metric_history(name, TONIGHT + timedelta(days=1), 2)[TONIGHT]
        nulls = [g for g, v in tonight.groups.items() if v is None]
        findings = [Finding(check_name=f"total_{n}", asset_key=self.asset, business_date=TONIGHT,
                            summary=f"{n}: rows with no VALUE", cause_scope="job:x",
                            evidence={"null_groups": {n: nulls}, "baseline": {"expected": 1.0}})
                    for n in [*([to_date] if to_date else []), name]]  # fmt: skip
        now = datetime.now(UTC)
        incident = Incident(incident_id="INC-1", cause_key="k", status="open", business_date=TONIGHT, title="t",
                            severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip
        return nulls, diagnose(incident, findings, self.ctx)


@pytest.fixture(params=SHAPES)
def world(request):
    with diagnosis_db("RAW", "REF", "CORE") as conn:
        yield World(conn, SHAPES[request.param])


@pytest.mark.parametrize(("nulled", "lag"), [("price", 0), ("key", 0), ("key", 1)])
def test_nulls_in_one_source_subset_are_value_loss_on_that_subset(world, nulled, lag):
    """price: the price arrives NULL for one store (meter) alone in its region (feeder), and the total, by
    region, sees that region NULL-valued: the store is named, not the region. key: the currency (tariff)
    arrives NULL on one channel's (read type's) rows; the rows leave their groups for a NULL-keyed group the
    rate join could not price, new tonight, with no value on the last good night to explain the fall. lag 1:
    the business date is a day after the source's rows (a run after the cutoff), and the source's own latest
    day is traced."""
    w = world
    by, label, rows, column, group = {
        "price": (w.group, f"{w.sub}={w.nulled_subset}", 4 * len(w.kinds), w.price,
                  f"{w.group}={w.groups[w.nulled_subset]}"),
        "key": (w.key, f"{w.kind}={w.nulled_kind}", 4 * len(w.subs), w.key, f"{w.key}=None"),
    }[nulled]  # fmt: skip
    nulls, d = w.diagnose(w.total(by), by, nulled, lag)
    assert nulls == [group]
    assert d.classification is CauseClass.VALUE_LOSS, d.cause
    assert [k.label for k in d.keys] == [label], d.cause
    assert d.keys[0].rows == rows and d.keys[0].units < 0
    assert d.cause_asset == w.src
    # Only the column that arrives NULL is named, not every column the value is computed from.
    others = {w.price, w.key, w.qty} - {column}
    assert column in d.cause and not any(f" {c} " in d.cause for c in others), d.cause
    assert (d.keys[0].change or "").startswith(f"{column} NULL")


def test_nulls_on_every_row_are_no_subset_and_name_the_null_valued_groups(world):
    w = world
    # Every row's price arrives NULL: no subset holds the NULLs while the others have none; the groups the
    # total records are the keys.
    w.nulled_subset = None
    nulls, d = w.diagnose(w.total(w.group), w.group, "price")
    assert d.classification is CauseClass.VALUE_LOSS, d.cause
    assert (
        sorted(k.label for k in d.keys)
        == sorted(nulls)
        == sorted({f"{w.group}={g}" for g in w.groups.values()})
    )
    assert d.cause_asset == w.asset


def test_of_two_totals_with_the_null_group_the_one_that_fell_is_explained(world):
    """A to-date total grows whatever a night lost: the NULL group is judged on the night's total, even when
    the to-date total's finding came first."""
    w = world
    name = w.total(w.key, "value_to_date")
    _, d = w.diagnose(name, w.key, "key", to_date="value_to_date")
    assert d.classification is CauseClass.VALUE_LOSS, d.cause
    assert d.evidence["total"] == name and d.evidence["fall_units"] > 0, d.cause
    assert [k.label for k in d.keys] == [f"{w.kind}={w.nulled_kind}"]
