"""Grouping by cause once the diagnosis lands, and the explanations the record holds: on the real store over
the local Snowflake server, with diagnoses as the diagnosis job writes them."""

from __future__ import annotations

from datetime import date

import pytest
from ops_warehouse import ops_schema, warehouse
from test_incident_store import finding

from dw_dagster.incidents.events import record_diagnosis
from dw_dagster.incidents.lifecycle import settle
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.incidents import BlastRadius, CauseClass, Diagnosis, KeyGap
from dw_dagster.records.policy import IncidentPolicy

__all__ = ["warehouse"]

POLICY = IncidentPolicy()
D16, D17, D18 = date(2025, 6, 16), date(2025, 6, 17), date(2025, 6, 18)


def diagnosis(klass: CauseClass, root: str = "raw/onhand", keys: tuple[str, ...] = ()) -> Diagnosis:
    return Diagnosis(
        incident_id="-", classification=klass, cause="c", path=[root, "inv/fct"],
        keys=[KeyGap(column=k.split("=")[0], value=k.split("=")[1], units=1.0, rows=1) for k in keys],
    )  # fmt: skip


def opened(
    store: IncidentStore, day: date, klass: CauseClass, keys=(), check="total_x", asset="inv/fct", **kw
):
    """A night's finding, diagnosed and settled as the diagnosis job does."""
    f = finding(check, asset, day=day, **kw)
    incident = store.record_finding(f).incident
    return settle(store, incident, diagnosis(klass, keys=keys), [f], POLICY)


@pytest.fixture
def store(warehouse, request):
    _, wh = warehouse
    return IncidentStore(wh, ops_schema(wh, f"OPS_{request.node.name[-20:].upper()}"))


def test_a_continuing_fault_continues_the_open_incident(store):
    first = opened(store, D16, CauseClass.STALE_INPUT, check="input_freshness")
    assert first.kind == "stands" and first.related == []
    second = opened(store, D17, CauseClass.STALE_INPUT, check="input_freshness")
    assert second.kind == "continues" and second.incident.incident_id == first.incident.incident_id
    provisional = store.list(status="merged")[0]
    assert provisional.merged_into == first.incident.incident_id
    nights = [e.detail["business_date"] for e in store.events(first.incident.incident_id, kind="finding")]
    assert nights == ["2025-06-16", "2025-06-17"]
    (continued,) = store.events(first.incident.incident_id, kind="continued")
    assert (
        continued.detail["incident_id"] == provisional.incident_id
        and continued.detail["night"] == "2025-06-17"
    )
    assert [i.incident_id for i in store.list(status="open")] == [first.incident.incident_id]


def test_a_new_fault_under_an_open_incident_stands_linked_to_it(store):
    old = opened(store, D16, CauseClass.REFERENCE_DATA_CHANGE, keys=("ORG=7030",))
    # Same table, same check, tonight a duplication: another class is another cause.
    new = opened(store, D17, CauseClass.DUPLICATION)
    assert new.kind == "stands" and [i.incident_id for i in new.related] == [old.incident.incident_id]
    assert store.get(new.incident.incident_id).detail["related"] == [old.incident.incident_id]
    (linked,) = store.events(old.incident.incident_id, kind="linked")
    assert linked.detail["incident_id"] == new.incident.incident_id
    # Other keys of the same class are another cause too; a subset of the keys is the same one.
    assert opened(store, D18, CauseClass.VALUE_LOSS, keys=("ORG=7120",)).kind == "stands"
    same = opened(store, D18, CauseClass.VALUE_LOSS, keys=("ORG=7030",), check="volume")
    assert same.kind == "continues" and same.incident.incident_id == old.incident.incident_id
    assert len(store.list(status="open")) == 3


def test_a_cause_back_soon_after_its_resolution_reopens_later_it_is_new(store):
    old = opened(store, D16, CauseClass.UNIT_CHANGE, keys=("ORG=7030",))
    store.set_status(old.incident.incident_id, "resolved", reason="its checks passed")
    back = opened(store, D18, CauseClass.UNIT_CHANGE, keys=("ORG=7030",))
    assert back.kind == "reopens" and back.incident.incident_id == old.incident.incident_id
    assert back.incident.status == "open" and back.incident.detail["reopened"] == 1
    store.set_status(old.incident.incident_id, "resolved", reason="its checks passed")
    late = opened(store, date(2025, 6, 25), CauseClass.UNIT_CHANGE, keys=("ORG=7030",))
    assert late.kind == "stands"


def test_a_stale_incident_never_absorbs_a_new_finding(store):
    old = opened(store, D16, CauseClass.VOLUME_LOSS)
    store.update_detail(old.incident.incident_id, stale_since="2025-06-19")
    assert opened(store, D17, CauseClass.VOLUME_LOSS).kind == "stands"


def receipt(store: IncidentStore, incident_id: str, verified: bool = True) -> None:
    """A receipt as the remediation job writes it (the parts the lifecycle reads)."""
    store.append_event(incident_id, "receipt", f"receipt|P-1|{verified}", {
        "plan_id": "P-1", "verified": verified,
        "proposals": [{"proposal_id": "p1", "kind": "reference_row", "reference_row": {"asset_key": "ref/map"}},
                      {"proposal_id": "p2", "kind": "node_change", "node_change": {"asset_key": "inv/fct"}}],
        "changes": [{"proposal_id": "p1", "added": True}],
        "verification": [{"expectation": {"kind": "rows_restored"}, "passed": verified}],
    })  # fmt: skip


def test_the_row_count_step_of_a_verified_fix_is_explained_not_an_incident(store):
    fixed = opened(store, D16, CauseClass.VALUE_LOSS, keys=("ORG=7120",)).incident
    record_diagnosis(store, fixed.incident_id, 1, diagnosis(CauseClass.VALUE_LOSS), BlastRadius())
    receipt(store, fixed.incident_id)
    store.set_status(fixed.incident_id, "resolved", reason="verified")
    up = {"row_count": 10_260, "baseline": {"expected": 9_000}}
    downstream = {"raw/onhand", "inv/fct"}
    for day in (D16, D17):  # the rebuilt night and the next nightly run
        out = store.record_finding(finding("volume", "mart/days", day=day, **up), ancestors=downstream)
        assert out.explained_by == f"the verified fix P-1 of {fixed.incident_id}", day
    assert store.list(status="open") == []
    assert len(store.events(fixed.incident_id, kind="explained")) == 2
    # Not explained: a drop, a total, an unrelated table, a night later than the window.
    down = {"row_count": 8_000, "baseline": {"expected": 9_000}}
    assert not store.record_finding(
        finding("volume", "mart/days", day=D17, **down), ancestors=downstream
    ).explained_by
    assert not store.record_finding(finding("total_x", "inv/fct", day=D17), ancestors=downstream).explained_by
    assert not store.record_finding(
        finding("volume", "other/t", day=D17, **up), ancestors={"raw/other"}
    ).explained_by
    assert not store.record_finding(finding("volume", "inv/fct", day=D18, **up)).explained_by


def test_a_failed_fix_explains_only_the_reference_rows_it_added(store):
    fixed = opened(store, D16, CauseClass.VALUE_LOSS, keys=("ORG=7120",)).incident
    receipt(store, fixed.incident_id, verified=False)
    up = {"row_count": 7, "baseline": {"expected": 6}}
    assert store.record_finding(
        finding("volume", "inv/dim", day=D16, **up), ancestors={"ref/map"}
    ).explained_by
    assert not store.record_finding(
        finding("volume", "inv/fct", day=D16, **up), ancestors={"raw/onhand"}
    ).explained_by


# Each shape: an open join fault on a fact, read from a source table (its path: source -> join node -> fact);
# tonight the source's own total moves (copies loaded into it); and two facts that only share an upstream
# lookup or calendar.
LINK_SHAPES = {
    "inventory": {
        "open": ("inv/fct_position", "stage/stg_onhand", ["raw/onhand", "stage/stg_onhand", "inv/fct_position"]),
        "tonight": ("raw/onhand", "raw/onhand", ["erp/onhand", "cdc/onhand_feed", "raw/onhand"]),
        "apart": [("sales/fct_orders", ["calendar/dim_date", "raw/orders", "sales/fct_orders"]),
                  ("sales/fct_returns", ["calendar/dim_date", "raw/returns", "sales/fct_returns"])],
    },
    "meters": {
        "open": ("grid/fct_readings", "grid/stg_readings",
                 ["head_end/readings", "grid/stg_readings", "grid/fct_readings"]),
        "tonight": ("head_end/readings", "head_end/readings", ["mdm/readings", "head_end/readings"]),
        "apart": [("grid/fct_usage", ["a_ref/regions", "head_end/usage", "grid/fct_usage"]),
                  ("billing/fct_invoices", ["a_ref/regions", "billing_raw/invoices", "billing/fct_invoices"])],
    },
}  # fmt: skip


def _placed(store, day, klass, asset, cause, path, keys=(), job="inventory_nightly"):
    f = finding("total_x", asset, day=day, scope=f"job:{job}")
    incident = store.record_finding(f).incident
    d = diagnosis(klass, keys=keys).model_copy(update={"cause_asset": cause, "path": path})
    return settle(store, incident, d, [f], POLICY)


@pytest.mark.parametrize("shape", LINK_SHAPES)
def test_a_fault_on_the_path_of_an_open_incident_is_linked_to_it_not_one_on_a_shared_ancestor(store, shape):
    s = LINK_SHAPES[shape]
    # The roots are where each cause sits (the join node, the table holding the copies) and the findings are
    # on different tables: tonight's is on the open incident's path between its cause and its symptom.
    old = _placed(store, D16, CauseClass.REFERENCE_DATA_CHANGE, *s["open"], keys=("K=1",))
    new = _placed(store, D17, CauseClass.DUPLICATION, *s["tonight"], keys=("K=2",))
    assert new.kind == "stands" and [i.incident_id for i in new.related] == [old.incident.incident_id]
    assert store.get(old.incident.incident_id).detail["path"] == s["open"][2]
    # Either way round: a fault whose path passes through the table an open incident's finding is on.
    (asset, cause, path) = s["open"]
    other = _placed(
        store, D17, CauseClass.VALUE_LOSS, asset.replace("fct_", "mart_"), cause, path, ("K=3",), "marts"
    )
    assert new.incident.incident_id in [i.incident_id for i in other.related]
    # Two facts whose paths only share an upstream table (a calendar, a region lookup) are not related.
    (a, pa), (b, pb) = s["apart"]
    first = _placed(store, D17, CauseClass.VOLUME_LOSS, a, a, pa, job="a_nightly")
    second = _placed(store, D17, CauseClass.VOLUME_LOSS, b, b, pb, job="b_nightly")
    assert first.related == [] and second.related == []
