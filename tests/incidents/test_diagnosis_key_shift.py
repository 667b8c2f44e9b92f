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
from key_shapes import ITEMS, KEYS, SHAPES, Shape, build, open_world, resolve

from dw_dagster.checks.attributes import MAX_VALUES, attribute_part, attribute_series, carried_attributes
from dw_dagster.checks.history import Recorded
from dw_dagster.coalesce.sql import resolve_refs
from dw_dagster.incidents.group_shift import (
    attribute_shift_diagnosis,
    judged_groups,
    moved_groups,
    trace_shift,
)
from dw_dagster.records.incidents import CauseClass, Finding, Incident

TONIGHT = date(2026, 5, 20)


@pytest.fixture(params=SHAPES)
def world(request):
    with open_world(request.param) as s:
        yield s


def _measure(s: Shape, column: str) -> dict[str, float]:
    """The total's aggregate grouped by ``column``, as the night's statement measures an attribute."""
    part = attribute_part(s.total, resolve_refs(s.total.sql, resolve), column)
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
    build(s, USUAL)
    assert _measure(s, s.key) == {f"{s.key}=11": 180, f"{s.key}=12": 115, f"{s.key}=15": 60}


def test_a_key_of_more_values_than_judged_reads_one_beyond_the_cap(world):
    s = world
    many = [(100 + i, "N", 1, 1000 + i) for i in range(MAX_VALUES + 9)]
    for item, grp, units, _ in many:
        s.ctx.cursor.execute(f"INSERT INTO {s.fact_t} VALUES (?, ?, ?)", (item, grp, units))
    build(s, {**USUAL, **{i: k for i, _, _, k in many}}, [*KEYS, *((k, "X", 1.0) for *_, k in many)])
    assert len(_measure(s, s.key)) == MAX_VALUES + 1


def test_a_key_re_pointed_upstream_is_named_with_the_table_whose_rows_moved(world):
    s = world
    series = attribute_series(s.total.name, s.key)
    build(s, USUAL)
    usual = _measure(s, s.key)
    for d in range(1, 8):
        _record(s, series, TONIGHT - timedelta(days=d), usual)
    # The lookups' rows move tonight: key 15's items now carry key 11.
    build(s, REPOINTED)
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
    build(s, USUAL)
    cur = s.ctx.cursor
    cur.execute(f'SELECT "{s.attr}", SUM("{s.measure}") FROM {s.node_t} GROUP BY 1')
    usual = {f"{s.attr}={g}": float(v) for g, v in cur.fetchall()}
    nights = [
        Recorded(business_date=TONIGHT - timedelta(days=d), value=355, groups=usual) for d in range(1, 8)
    ]
    build(s, USUAL, KEYS[:2])
    cur.execute(f'SELECT "{s.attr}", SUM("{s.measure}") FROM {s.node_t} GROUP BY 1')
    groups = {f"{s.attr}={g}": float(v) for g, v in cur.fetchall()}
    assert groups == {f"{s.attr}=PREPAID": 180, f"{s.attr}=POSTPAID": 115}
    tonight = Recorded(business_date=TONIGHT, value=295, groups=groups)
    by = s.total.model_copy(update={"group_keys": [s.attr]})
    judged = judged_groups([{"group": f"{s.attr}=BUSINESS", "status": "went"}], None, lambda: nights, tonight)
    assert moved_groups(tonight, nights[0], judged) is None
    assert trace_shift(s.ctx, by, tonight, nights[0], judged) is None
