"""The scenario and world file formats, the generic world's data and events, the Elementary baseline and
the scoring rules; none of it needs the local servers."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from dw_dagster.config import DwConfigError
from dw_local.scenarios.baseline import z_score
from dw_local.scenarios.model import load_scenario
from dw_local.scenarios.observe import Alarm, IncidentReport
from dw_local.scenarios.runner import NightReport
from dw_local.scenarios.score import BASELINE, DW, format_score, score_night, score_reports
from dw_local.scenarios.suite import SUITE_DIR, scenario_files
from dw_local.scenarios.worlds import FileScenarioWorld

ECOMMERCE = SUITE_DIR.parent / "worlds" / "ecommerce" / "world.yaml"
BILLPAY = SUITE_DIR.parent / "worlds" / "billpay" / "world.yaml"
FAULTS = {
    "new_key_unmapped", "reference_row_deleted", "reference_row_remapped", "duplicate_load", "partial_load",
    "replication_stalled", "unit_change", "null_join_key", "column_renamed", "column_dropped", "node_failure",
    "scheduler_skip", "source_not_refreshed",
}  # fmt: skip


def test_the_public_suite_covers_the_vocabulary_on_four_worlds():
    scenarios = [load_scenario(p) for p in scenario_files(SUITE_DIR)]
    assert len(scenarios) >= 40
    assert {s.world.name for s in scenarios} == {"distributor", "ecommerce", "adspend", "billpay"}
    kinds = {e["kind"] for s in scenarios for n in s.file.nights for e in n.events}
    assert FAULTS | {"new_key_parent_unmapped"} <= kinds
    assert {"new_key_mapped", "steady_growth"} <= kinds
    # The third world plays the whole vocabulary on its own, a subset unit change and a sign flip included.
    third = [s for s in scenarios if s.world.name == "adspend"]
    assert len(third) >= 12
    assert FAULTS - {e["kind"] for s in third for n in s.file.nights for e in n.events} == set()
    changes = [e for s in third for n in s.file.nights for e in n.events if e["kind"] == "unit_change"]
    assert all(e.get("where") for e in changes) and {e["factor"] < 0 for e in changes} == {True, False}
    # Weekend and month-end nights are played clean: the calendar is a benign event too.
    dates = {s.world.business_date(s.night_index(k)) for s in scenarios for k in range(len(s.file.nights))}
    assert any(d.weekday() >= 5 for d in dates)
    assert any((d + timedelta(days=1)).month != d.month for d in dates)
    assert {date(2025, 12, 25), date(2025, 12, 26), date(2026, 1, 1)} <= dates  # bank holidays, played clean
    names = [s.name for s in scenarios]
    assert len(set(names)) == len(names)
    # The fourth world: a subdivision's own holiday, a quarter-end and Canada Day played clean; a fault on the
    # quarter-end night; one that stays in its month-to-date total on the nights after.
    fourth = [s for s in scenarios if s.world.name == "billpay"]
    dates = {s.world.business_date(s.night_index(k)) for s in fourth for k in range(len(s.file.nights))}
    assert {date(2026, 6, 24), date(2026, 6, 30), date(2026, 7, 1)} <= dates
    faulted = {s.world.business_date(s.night_index(k)) for s in fourth for k in range(len(s.file.nights))
               if s.is_fault_night(k)}  # fmt: skip
    assert date(2026, 6, 30) in faulted
    lasting = [s for s in fourth for night in s.events for e in night if e.stays_in]
    assert lasting and all(
        n.expect.joins for s in lasting for k, n in enumerate(s.file.nights) if not s.is_fault_night(k)
    )


def _scenario(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text.replace("WORLD", str(ECOMMERCE)))
    return path


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("name: x\nworld: WORLD\nnights: [{}]\nnight: 3\n", ["night: Extra inputs are not permitted"]),
        ("name: x\nworld: WORLD\nnights: []\n", ["nights: List should have at least 1 item"]),
        ("name: X Y\nworld: WORLD\nnights: [{}]\n", ["name: String should match pattern"]),
        (
            "name: x\nworld: WORLD\nnights: [{events: [{kind: meteor_strike}]}]\n",
            ["nights.0.events.0 (meteor_strike)", "kind"],
        ),
        (
            "name: x\nworld: WORLD\nnights: [{}, {events: [{kind: unit_change, table: ORDER_LINES, column: PRICE}]}]\n",
            ["nights.1.events.0 (unit_change)", "column: ORDER_LINES has no column PRICE"],
        ),
        (
            "name: x\nworld: WORLD\nnights: [{events: [{kind: partial_load, table: ORDERS}]}]\n",
            ["nights.0.events.0 (partial_load)", "table: ORDERS is not a source of world ecommerce"],
        ),
        (
            "name: x\nworld: WORLD\nnights: [{events: [{kind: partial_load, table: ORDER_LINES, fraction: 2}]}]\n",
            ["nights.0.events.0 (partial_load)", "fraction: Input should be less than or equal to 1"],
        ),
        (
            "name: x\nworld: distributor\nnights: [{events: [{kind: scheduler_skip, org_id: 7010}]}]\n",
            ["nights.0.events.0 (scheduler_skip)", "org_id: Extra inputs are not permitted"],
        ),
        (
            "name: x\nworld: no/such/world.yaml\nnights: [{}]\n",
            ["world:", "world file not found"],
        ),
        ("name: x\nworld: WORLD\nnights: [{expect: {class: [typo]}}]\n", ["nights.0.expect.class.0"]),
        # Each event changes the kind of table it names: a night's new rows, or the reference rows.
        *(
            (
                f"name: x\nworld: WORLD\nnights: [{{events: [{{kind: {kind}, table: STORE_MAP{extra}}}]}}]\n",
                [
                    f"nights.0.events.0 ({kind})",
                    "STORE_MAP is load: once",
                    "expected an append or snapshot source",
                ],
            )
            for kind, extra in [
                ("duplicate_load", ""),
                ("partial_load", ""),
                ("unit_change", ", column: STORE_ID"),
                ("null_join_key", ", column: STORE_ID"),
                ("new_key_unmapped", ", column: STORE_ID, value: 9"),
                ("new_key_mapped", ", column: STORE_ID, value: 9, reference: STORE_MAP, row: {STORE_ID: 9}"),
            ]
        ),
        *(
            (
                f"name: x\nworld: WORLD\nnights: [{{events: [{{kind: {kind}, table: ORDER_LINES, where: {{STORE_ID: 3}}{extra}}}]}}]\n",
                [f"nights.0.events.0 ({kind})", "ORDER_LINES is load: append: expected a load: once source"],
            )
            for kind, extra in [
                ("reference_row_deleted", ""),
                ("reference_row_remapped", ", set: {STORE_ID: 4}"),
            ]
        ),
        (
            "name: x\nworld: WORLD\nnights: [{events: [{kind: new_key_mapped, table: ORDER_LINES, column: STORE_ID, "
            "value: 9, reference: ORDER_LINES, row: {ORDER_LINE_ID: 9}}]}]\n",
            [
                "nights.0.events.0 (new_key_mapped)",
                "reference: ORDER_LINES is not a load: once (reference) source",
            ],
        ),
        (
            "name: x\nworld: WORLD\nnights: [{events: [{kind: unit_change, table: ORDER_LINES, column: ORDERED_AT}]}]\n",
            [
                "nights.0.events.0 (unit_change)",
                "column: unit_change multiplies a number; ORDER_LINES.ORDERED_AT is TIMESTAMP_NTZ",
            ],
        ),
        (
            "name: x\nworld: WORLD\nnights: [{events: [{kind: reference_row_deleted, table: STORE_MAP, where: {STORE_ID: 99}}]}]\n",
            [
                "nights.0.events.0 (reference_row_deleted)",
                "where: no row of STORE_MAP matches {'STORE_ID': 99}",
            ],
        ),
        (
            "name: x\nworld: WORLD\nnights: [{events: [{kind: unit_change, table: ORDER_LINES, column: UNIT_PRICE, "
            "factor: 1}]}]\n",
            ["nights.0.events.0 (unit_change)", "factor: Value error, expected a factor other than 0 and 1"],
        ),
        (
            "name: x\nworld: WORLD\nnights: [{events: [{kind: unit_change, table: ORDER_LINES, column: UNIT_PRICE, "
            "where: {STORE_ID: [9, 10]}}]}]\n",
            [
                "nights.0.events.0 (unit_change)",
                "where: ORDER_LINES.STORE_ID never holds [9, 10] (its values: 1, 2, 3, 4, 5, 6)",
            ],
        ),
        (
            "name: x\nworld: WORLD\nnights: [{events: [{kind: source_not_refreshed, table: STORE_MAP}]}]\n",
            [
                "nights.0.events.0 (source_not_refreshed)",
                "table: STORE_MAP is load: once and never re-synced",
                "sources.STORE_MAP.refresh",
            ],
        ),
        (
            "name: x\nworld: WORLD\nnights: [{events: [{kind: source_not_refreshed}]}]\n",
            ["nights.0.events.0 (source_not_refreshed)", "table: Field required"],
        ),
        (
            "name: x\nworld: WORLD\nnights: [{}, {expect: {incident: true, class: [value_loss]}}]\n",
            ["nights.1.expect.incident: true, but no fault is played that night or still in force"],
        ),
        (
            "name: x\nworld: WORLD\nnights: [{events: [{kind: duplicate_load, table: ORDER_LINES}]}]\n",
            ["nights.0.expect.class: the night expects an incident: expected the diagnosis classes"],
        ),
        (
            "name: x\nworld: distributor\nnights: [{events: [{kind: new_key_unmapped}, {kind: scheduler_skip}], "
            "expect: {class: [value_loss]}}]\n",
            ["nights.0.events: new_key_unmapped: the distributor's reference night is played alone"],
        ),
    ],
)
def test_a_bad_scenario_file_names_the_file_and_the_field(tmp_path, text, fragments):
    path = _scenario(tmp_path, text)
    with pytest.raises(DwConfigError) as err:
        load_scenario(path)
    message = str(err.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, message


_PAYEE = (
    "{kind: new_key_parent_unmapped, table: BILL_PAYMENTS, column: PAYEE_CODE, value: NEWCODE, reference: "
    "PAYEE_CODES, row: {PAYEE_CODE: NEWCODE, PAYEE_NAME: n, BILLER_ID: %BILLER%}, parent: %PARENT%}"
)
_LASTING = "{kind: duplicate_load, table: BILL_PAYMENTS, stays_in: [MART_REMITTANCE_MTD]}"


@pytest.mark.parametrize(
    ("nights", "fragments"),
    [
        (
            f"[{{events: [{_PAYEE.replace('%BILLER%', '104').replace('%PARENT%', 'BILLERS.BILLER_ID')}]}}]",
            ["nights.0.events.0 (new_key_parent_unmapped)", "parent: BILLERS has a row for BILLER_ID=104",
             "that is new_key_mapped"],
        ),
        (
            f"[{{events: [{_PAYEE.replace('%BILLER%', '110').replace('%PARENT%', 'BILL_PAYMENTS.PAYEE_CODE')}]}}]",
            ["parent: BILL_PAYMENTS is not a load: once (reference) source of world billpay"],
        ),
        (
            f"[{{events: [{_PAYEE.replace('BILLER_ID: %BILLER%', 'UPDATED_AT: null').replace('%PARENT%', 'BILLERS.BILLER_ID')}]}}]",
            ["row: names no BILLER_ID, the key of the parent BILLERS it points at"],
        ),
        (
            "[{events: [{kind: reference_row_remapped, table: BILLERS, where: {BILLER_ID: 101}, "
            "set: {SETTLEMENT_NETWORK: ACSS}, stays_in: [DIM_BILLER]}]}]",
            ["nights.0.events.0 (reference_row_remapped)",
             "stays_in: reference_row_remapped does not leave one night's rows behind"],
        ),
        (
            "[{events: [{kind: duplicate_load, table: BILL_PAYMENTS, stays_in: [BILLERS]}]}]",
            ["stays_in[0]: BILLERS is not a built node of"],
        ),
        (
            f"[{{events: [{_LASTING}], expect: {{class: [duplication]}}}}, {{repair: true}}]",
            ["nights.1.repair: duplicate_load stays_in nodes with its rows, and world billpay cannot reload"],
        ),
    ],
)  # fmt: skip
def test_a_bad_event_on_the_fourth_world_names_the_file_and_the_field(tmp_path, nights, fragments):
    path = tmp_path / "s.yaml"
    path.write_text(f"name: x\nworld: {BILLPAY}\nnights: {nights}\n")
    with pytest.raises(DwConfigError) as err:
        load_scenario(path)
    for fragment in [str(path), *fragments]:
        assert fragment in str(err.value), str(err.value)


def test_a_fault_that_stays_in_a_cumulative_node_is_in_force_there_only_on_the_nights_after(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        f"name: x\nworld: {BILLPAY}\nnights: [{{events: [{_LASTING}], expect: {{class: [duplication]}}}}, "
        "{expect: {incident: true, class: [duplication], joins: true}}]\n"
    )
    scenario = load_scenario(path)
    world, (event,) = scenario.world, scenario.events[0]
    assert world.persists(event) and not event.persists
    assert world.targets(event) == ["payhub_raw/bill_payments"]
    assert world.lasting_targets(event) == ["mart/mart_remittance_mtd"]
    # A fault in force everywhere until repaired is in force everywhere on the nights after, too.
    unmapped = world.parse_event(
        {"kind": "new_key_unmapped", "table": "BILL_PAYMENTS", "column": "PAYEE_CODE", "value": "X"}, 0
    )
    assert world.lasting_targets(unmapped) == world.targets(unmapped) == ["payhub_raw/bill_payments"]


def test_a_new_key_whose_parent_is_unmapped_carries_the_new_key_in_tonights_rows():
    scenario_world = FileScenarioWorld(BILLPAY)
    world = scenario_world.world
    night = world.spec.history_nights
    event = scenario_world.parse_event(
        {"kind": "new_key_parent_unmapped", "table": "BILL_PAYMENTS", "column": "PAYEE_CODE", "value": "VIDEOBUS",
         "fraction": 0.06, "reference": "PAYEE_CODES", "parent": "BILLERS.BILLER_ID",
         "row": {"PAYEE_CODE": "VIDEOBUS", "PAYEE_NAME": "Videotron Affaires", "BILLER_ID": 110}},
        night,
    )  # fmt: skip
    assert not event.benign and event.persists and event.tables() == ["BILL_PAYMENTS", "PAYEE_CODES"]
    clean = world.night_frames(night)["BILL_PAYMENTS"]
    rows = event.transform(world, {"BILL_PAYMENTS": clean}, night)["BILL_PAYMENTS"]
    assert (rows["PAYEE_CODE"] == "VIDEOBUS").sum() == round(0.06 * len(clean))


@pytest.mark.parametrize(
    ("edit", "fragments"),
    [
        (
            ("{sequence: 1}", "{sequence: 1, value: 3}"),
            ["sources.ORDER_LINES.columns.ORDER_LINE_ID", "exactly one of"],
        ),
        (("ref: STORE_MAP.STORE_ID", "ref: STORES.STORE_ID"), ["STORES is not a source with load: once"]),
        (("      QUANTITY: {integer: [1, 3]}\n", ""), ["sources.ORDER_LINES: generates columns", "QUANTITY"]),
        (("business_time: [7, 23]", "business_time: [23, 7]"), ["business_time: [23, 7] is not [low, high]"]),
        (
            ("timezone: America/New_York", "timezone: Mars/Olympus"),
            ["timezone: invalid timezone: Mars/Olympus"],
        ),
        (
            ("count: 400", "count: {per_night: 400}"),
            ["sources.PRODUCTS: Value error, count: a generated load: once table"],
        ),
        (
            ("weights: [35, 20, 10, 10, 15, 10]", "weights: [35, 20, 10]"),
            [
                "sources.ORDER_LINES.columns.STORE_ID.weights: expected one weight per row of STORE_MAP (6), got 3"
            ],
        ),
        (
            (
                "PRODUCT_ID: {ref: PRODUCTS.PRODUCT_ID}",
                "PRODUCT_ID: {ref: PRODUCTS.PRODUCT_ID, weights: [1, 2]}",
            ),
            [
                "sources.ORDER_LINES.columns.PRODUCT_ID.weights: expected one weight per row of PRODUCTS (400), got 2"
            ],
        ),
        (
            ("weights: [30, 20, 15, 10, 15, 10]", "weights: [0, 0, 0, 0, 0, 0]"),
            ["weights: expected non-negative"],
        ),
        (
            ("PRODUCT_ID: {sequence: 5001}", "PRODUCT_ID: {integer: [5001, 5010]}"),
            ["sources.ORDER_LINES.columns.UNIT_PRICE.by: expected a unique key of PRODUCTS"],
        ),
        (
            (
                '{name: STORE_NAME, dataType: "VARCHAR(60)"',
                '{name: STORE_NAME, dataType: "VARCHAR(60)); DROP TABLE X; --"',
            ),
            [
                "Source node STORE_MAP column STORE_NAME: dataType 'VARCHAR(60)); DROP TABLE X; --' is not a Snowflake type"
            ],
        ),
        (("holidays: {country: US}", "holidays: {country: XX}"), ["holidays", "no country 'XX'"]),
        (
            ("holidays: {country: US}", "holidays: {subdivision: NY}"),
            ["holidays", "subdivision: needs country"],
        ),
        (
            ("refresh: {column: _FIVETRAN_SYNCED", "refresh: {column: SYNCED_AT"),
            ["sources.PRODUCTS.refresh.column: PRODUCTS has no column SYNCED_AT"],
        ),
        (
            (
                "    load: append\n",
                "    load: append\n    refresh: {column: _FIVETRAN_SYNCED, at: '01:00:00'}\n",
            ),
            ["sources.ORDER_LINES", "refresh: only a load: once table is re-synced"],
        ),
    ],
)
def test_a_bad_world_file_names_the_file_and_the_field(tmp_path, edit, fragments):
    folder = ECOMMERCE.parent
    texts = {
        name: (folder / name).read_text()
        for name in ("world.yaml", "project.yaml", "context.yaml", "metrics.yaml")
    }
    edited = next(name for name, text in texts.items() if edit[0] in text)  # world.yaml first
    texts[edited] = texts[edited].replace(edit[0], edit[1])
    for name, text in texts.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(DwConfigError) as err:
        FileScenarioWorld(tmp_path / "world.yaml")
    for fragment in [str(tmp_path / "world.yaml"), *fragments]:
        assert fragment in str(err.value), str(err.value)


def test_a_world_file_plays_the_same_data_from_the_same_seed_and_follows_the_calendar():
    world = FileScenarioWorld(ECOMMERCE).world
    night = world.spec.history_nights
    first, again = world.night_frames(night)["ORDER_LINES"], world.night_frames(night)["ORDER_LINES"]
    pd.testing.assert_frame_equal(first, again)
    assert first["ORDER_LINE_ID"].is_unique
    assert set(first["STORE_ID"]) <= set(world.once_frame("STORE_MAP")["STORE_ID"])
    prices = world.once_frame("PRODUCTS").set_index("PRODUCT_ID")["LIST_PRICE"]
    assert (first["UNIT_PRICE"].to_numpy() == prices.reindex(first["PRODUCT_ID"]).to_numpy()).all()
    # Replication stamps a line after it was ordered (ORDERED_AT is New York time, the stamp UTC).
    lag = first["_FIVETRAN_SYNCED"] - (first["ORDERED_AT"] + pd.Timedelta(hours=4))
    assert lag.between(pd.Timedelta(seconds=30), pd.Timedelta(seconds=600)).all()
    counts = {world.business_date(n): world.rows_tonight("ORDER_LINES", n) for n in range(night, night + 7)}
    weekday = [c for d, c in counts.items() if d.weekday() < 5 and d.day < 29]
    assert counts[date(2025, 5, 31)] > max(weekday)  # month-end outweighs the weekend dip
    assert counts[date(2025, 6, 1)] < min(weekday)  # a plain Sunday


def test_generic_events_change_exactly_what_they_say():
    scenario_world = FileScenarioWorld(ECOMMERCE)
    world = scenario_world.world
    night = world.spec.history_nights
    clean = world.night_frames(night)

    def played(**event):
        return scenario_world.parse_event(event, night).transform(world, clean, night)["ORDER_LINES"]

    lines = clean["ORDER_LINES"]
    assert len(played(kind="duplicate_load", table="ORDER_LINES")) == 2 * len(lines)
    partial = played(kind="partial_load", table="ORDER_LINES", fraction=0.25)
    assert len(partial) == len(lines) - round(0.25 * len(lines))
    uk = lines["STORE_ID"] == 4
    scaled = played(
        kind="unit_change", table="ORDER_LINES", column="UNIT_PRICE", factor=100, where={"STORE_ID": 4}
    )
    assert (scaled.loc[uk, "UNIT_PRICE"] == (lines.loc[uk, "UNIT_PRICE"] * 100).round(2)).all()
    assert (scaled.loc[~uk, "UNIT_PRICE"] == lines.loc[~uk, "UNIT_PRICE"]).all()
    new = played(kind="new_key_unmapped", table="ORDER_LINES", column="STORE_ID", value=7, fraction=0.1)
    assert (new["STORE_ID"] == 7).sum() == round(0.1 * len(lines))
    nulled = played(kind="null_join_key", table="ORDER_LINES", column="STORE_ID", fraction=0.1)
    assert nulled["STORE_ID"].isna().sum() == round(0.1 * len(lines))
    # A scenario's since_night counts from its own first night.
    growth = scenario_world.parse_event({"kind": "steady_growth", "pct": 1, "since_night": 1}, night)
    assert growth.since_night == night + 1 and growth.growth(night + 2) == pytest.approx(1.01**2)


@pytest.mark.parametrize("factor", [3.7, 0.27, -1, 100])
def test_unit_change_scales_a_subset_by_any_factor_as_the_column_carries_it(factor):
    scenario_world = FileScenarioWorld(ECOMMERCE)
    world = scenario_world.world
    night = world.spec.history_nights
    lines = world.night_frames(night)["ORDER_LINES"]
    event = scenario_world.parse_event(
        {"kind": "unit_change", "table": "ORDER_LINES", "column": "UNIT_PRICE", "factor": factor,
         "where": {"STORE_ID": [3, 4]}},
        night,
    )  # fmt: skip
    scaled = event.transform(world, {"ORDER_LINES": lines}, night)["ORDER_LINES"]
    subset = lines["STORE_ID"].isin([3, 4])
    assert 0 < subset.sum() < len(lines)
    # NUMBER(18,2): the values the source now carries are rounded to cents, as the column stores them.
    expected = (lines.loc[subset, "UNIT_PRICE"] * factor).round(2)
    assert (scaled.loc[subset, "UNIT_PRICE"] == expected).all()
    assert (scaled.loc[~subset, "UNIT_PRICE"] == lines.loc[~subset, "UNIT_PRICE"]).all()
    measured = scaled.loc[subset, "UNIT_PRICE"].sum() / lines.loc[subset, "UNIT_PRICE"].sum()
    assert measured == pytest.approx(factor, rel=1e-3)


def test_a_world_calendar_dips_or_peaks_on_its_holidays():
    from dw_local.scenarios.world_file import Holidays

    world = FileScenarioWorld(ECOMMERCE).world
    plain = FileScenarioWorld(ECOMMERCE).world
    plain.spec = plain.spec.model_copy(update={"holidays": Holidays()})
    memorial_day = next(n for n in range(60) if world.business_date(n) == date(2025, 5, 26))
    assert world.is_holiday(date(2025, 5, 26)) and not plain.is_holiday(date(2025, 5, 26))
    # The same draws, the holiday's factor on top (Memorial Day is a sale day for the retailer).
    ratio = world.rows_tonight("ORDER_LINES", memorial_day) / plain.rows_tonight("ORDER_LINES", memorial_day)
    assert ratio == pytest.approx(1.15, abs=1e-3)
    assert world.rows_tonight("ORDER_LINES", memorial_day - 7) == plain.rows_tonight(
        "ORDER_LINES", memorial_day - 7
    )


@pytest.mark.parametrize(
    ("world_file", "table", "month_end", "quarter_end"),
    [
        (ECOMMERCE, "ORDER_LINES", date(2025, 5, 31), date(2025, 6, 30)),
        (BILLPAY, "BILL_PAYMENTS", date(2026, 5, 31), date(2026, 6, 30)),
    ],
)
def test_a_quarter_end_factor_peaks_only_the_month_ends_that_close_a_quarter(
    world_file, table, month_end, quarter_end
):
    world = FileScenarioWorld(world_file).world
    plain = FileScenarioWorld(world_file).world
    source = world.spec.sources[table]
    counted = source.model_copy(update={"count": source.count.model_copy(update={"quarter_end_factor": 1.5})})
    world.spec = world.spec.model_copy(update={"sources": {**world.spec.sources, table: counted}})

    def night(day):
        return (day - world.spec.first_business_day).days

    # The same draws; the factor on top on the quarter's last month-end days only.
    ratio = world.rows_tonight(table, night(quarter_end)) / plain.rows_tonight(table, night(quarter_end))
    assert ratio == pytest.approx(1.5, abs=1e-3)
    for day in (month_end, quarter_end - timedelta(days=7)):
        assert world.rows_tonight(table, night(day)) == plain.rows_tonight(table, night(day))


def test_the_distributor_calendar_dips_on_its_holidays():
    from dw_local.worlds.distributor.generator import DistributorWorld
    from dw_local.worlds.distributor.simulation import calendar_factor

    world = DistributorWorld()
    memorial_day = (date(2025, 5, 26) - world.spec.first_business_day).days
    assert calendar_factor(world.spec, date(2025, 5, 26)) == world.spec.demand.holiday_factor < 1
    shipped = {t: world.simulation.demand(t)[0].sum() for t in (memorial_day - 7, memorial_day)}
    assert shipped[memorial_day] < 0.5 * shipped[memorial_day - 7]


def test_the_elementary_z_score_keeps_the_scored_point_in_its_window():
    flat = [100.0] * 13
    # With the point inside the window |z| can never exceed (n-1)/sqrt(n): 3.47 for 14 points ...
    assert z_score(flat, 1e9)[2] == pytest.approx(13 / 14**0.5)
    # ... and 2.85 with 10 points, so a short history never alarms whatever happens.
    assert z_score([100.0] * 9, 0.0)[2] == pytest.approx(-9 / 10**0.5)
    assert z_score(flat, 100.0)[2] == 0.0


def _night(**changes) -> NightReport:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    base = dict(
        night=1, business_date=date(2025, 6, 16), events=["x"], fault=True, expects_incident=True,
        expected_classes=["value_loss"], expected_keys=["ORGANIZATION_ID=7120"],
        related=["inventory/fct", "mart/m"], run_id=1, run_status="completed", run_ended_at=at,
        monitored=["inventory/fct", "mart/m", "inventory/dim"],
    )  # fmt: skip
    return NightReport(**{**base, **changes})


def _incident(
    classification: str, keys: list[str], assets: tuple[str, ...] = ("inventory/fct",)
) -> IncidentReport:
    return IncidentReport("INC", "t", classification, "c", keys, {}, [], 0, [], 1.0, list(assets))


def test_scoring_counts_related_detections_false_alarms_and_root_causes():
    at = datetime(2026, 1, 1, tzinfo=UTC)
    night = _night(
        alarms=[
            Alarm("inventory/fct", "total", "s", at + timedelta(seconds=2)),
            Alarm("inventory/dim", "volume", "s", at),
        ],
        incidents=[_incident("value_loss", ["ORGANIZATION_ID=7120", "ORGANIZATION_ID=7020"])],
        baseline_alarms=[{"asset": "inventory/dim", "recorded_at": at + timedelta(seconds=1)}],
    )
    dw, base, _ = score_night(night)
    assert (dw.detected, dw.false_alarms, dw.correct, dw.ttd) == (1, 1, 1, [2.0])
    assert (base.detected, base.false_alarms, base.ttd) == (0, 1, [])
    wrong_key = _night(incidents=[_incident("value_loss", ["ORGANIZATION_ID=7020"])])
    assert score_night(wrong_key)[0].correct == 0
    # The right class and key on an incident about an unrelated table did not find this fault.
    elsewhere = _night(incidents=[_incident("value_loss", ["ORGANIZATION_ID=7120"], ("inventory/dim",))])
    assert score_night(elsewhere)[0].correct == 0
    # A benign night: every alarm is false, nothing is a fault.
    benign = _night(
        fault=False, expects_incident=False, related=[], alarms=[Alarm("mart/m", "volume", "s", at)]
    )
    dw, base, _ = score_night(benign)
    assert (dw.faults, dw.false_alarms, dw.table_nights) == (0, 1, 3)


def test_the_baselines_repeat_of_last_nights_point_is_no_detection_but_can_be_a_false_alarm():
    at = datetime(2026, 1, 1, tzinfo=UTC)
    repeat = {"asset": "inventory/fct", "recorded_at": at, "rescored": True}
    fault = _night(baseline_alarms=[repeat, {**repeat, "asset": "inventory/dim"}])
    _, base, _ = score_night(fault)
    assert (base.detected, base.false_alarms, base.ttd) == (0, 1, [])
    tonight = _night(
        baseline_alarms=[{**repeat, "rescored": False, "recorded_at": at + timedelta(seconds=4)}]
    )
    assert (score_night(tonight)[1].detected, score_night(tonight)[1].ttd) == (1, [4.0])
    assert BASELINE == "Elementary 0.25.1 defaults"


def test_a_sign_change_names_an_expected_unit_change_and_a_key_of_several_columns_any_of_its_labels():
    def correct(expected: str, got: str, key: str = "KIND=audio", named: str = "KIND=audio") -> int:
        night = _night(expected_classes=[expected], expected_keys=[key], incidents=[_incident(got, [named])])
        return score_night(night)[0].correct

    assert correct("unit_change", "sign_change")
    # Not the other way round, and never another class.
    assert not correct("sign_change", "unit_change")
    assert not correct("unit_change", "value_loss")
    # A two-column key named one label per column: the expected column's label is among them.
    assert correct("value_loss", "value_loss", "TAG=CN-203", "SITE=DRS, TAG=CN-203")
    assert not correct("value_loss", "value_loss", "TAG=CN-204", "SITE=DRS, TAG=CN-203")


def test_score_totals_add_up_over_scenarios():
    from dw_local.scenarios.runner import ScenarioReport

    at = datetime(2026, 1, 1, tzinfo=UTC)
    hit = _night(
        alarms=[Alarm("mart/m", "total", "s", at)],
        incidents=[_incident("value_loss", ["ORGANIZATION_ID=7120"])],
    )
    miss = _night(alarms=[])
    score = score_reports(
        [ScenarioReport("a", "a.yaml", "w", 60, [hit]), ScenarioReport("b", "b.yaml", "w", 60, [miss])]
    )
    assert score["total"][DW]["recall"] == 0.5 and score["total"][DW]["root_cause_accuracy"] == 0.5
    assert score["total"][BASELINE]["recall"] == 0.0
    assert score["total"][DW]["table_nights"] == score["total"][BASELINE]["table_nights"] == 6


def test_time_to_detect_is_compared_on_faults_both_detected_and_recall_split_by_the_run():
    from dw_local.scenarios.runner import ScenarioReport

    at = datetime(2026, 1, 1, tzinfo=UTC)
    both = _night(
        alarms=[Alarm("mart/m", "total", "s", at + timedelta(seconds=2))],
        baseline_alarms=[{"asset": "mart/m", "recorded_at": at + timedelta(seconds=3)}],
    )
    # A failed node dw-dagster alone reports, 40 s in: it must not enter the comparison with the baseline.
    failed = _night(
        run_status="failed", alarms=[Alarm("mart/m", "coalesce_run", "s", at + timedelta(seconds=40))]
    )
    skipped = _night(run_id=None, run_status="skipped")
    score = score_reports([ScenarioReport("a", "a.yaml", "w", 60, [both, failed, skipped])])
    dw, base = score["total"][DW], score["total"][BASELINE]
    assert (
        dw["both_detected"],
        dw["time_to_detect_both_median_s"],
        base["time_to_detect_both_median_s"],
    ) == (1, 2.0, 3.0)
    assert (dw["time_to_detect_median_s"], dw["time_to_detect_max_s"]) == (21.0, 40.0)
    assert (dw["failed_run_faults"], dw["failed_run_detected"], base["failed_run_detected"]) == (1, 1, 0)
    assert (dw["silent_faults"], dw["silent_detected"], base["silent_detected"]) == (2, 1, 1)
    table = format_score(score)
    assert (
        "| time to detect, the 1 faults both detected (run end -> first alarm) | 2.0 s median, 2.0 s max | 3.0 s"
        in table
    )
    assert "| recall, Coalesce job failed | 1/1 (100%) | 0/1 (0%) |" in table
    assert "| recall, silent (job green, or no run) | 1/2 (50%) | 1/2 (50%) |" in table


def test_score_checks_every_file_and_reports_all_problems_before_playing(tmp_path):
    from click.testing import CliRunner

    from dw_local.scenarios.cli import scenario

    _scenario(tmp_path, "name: good\nworld: WORLD\nnights: [{}]\n", "a_good.yaml")
    first = _scenario(
        tmp_path, "name: x\nworld: WORLD\nnights: [{events: [{kind: partial_load}]}]\n", "b.yaml"
    )
    second = _scenario(tmp_path, "name: y\nworld: WORLD\nnights: [{expect: {incident: true}}]\n", "c.yaml")
    result = CliRunner().invoke(scenario, ["score", str(tmp_path), "--cache", str(tmp_path / "cache")])
    assert isinstance(result.exception, DwConfigError), result.output
    message = str(result.exception)
    assert "2 of 3 scenario files are invalid; nothing was played" in message
    assert f"{first}: nights.0.events.0 (partial_load): table: Field required" in message
    assert f"{second}: nights.0.expect.incident" in message
    assert "playing" not in result.output and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("first_day", ["2025-11-01", "2025-03-08"])
def test_synced_times_cross_a_daylight_saving_change(tmp_path, first_day):
    """A business open all night has wall times in the repeated autumn hour and the skipped spring hour."""
    for name in ("world.yaml", "project.yaml", "context.yaml", "metrics.yaml"):
        text = (ECOMMERCE.parent / name).read_text()
        text = text.replace("first_business_day: 2025-04-15", f"first_business_day: {first_day}")
        (tmp_path / name).write_text(text.replace("business_time: [7, 23]", "business_time: [0, 24]"))
    world = FileScenarioWorld(tmp_path / "world.yaml").world
    change = world.night_frames(1)["ORDER_LINES"]  # Sunday 2 November / 9 March: the clocks change at 02:00
    ordered, synced = change["ORDERED_AT"], change["_FIVETRAN_SYNCED"]
    at_night = ordered.dt.hour.isin([1, 2])
    assert at_night.sum() > 50
    # UTC is 4 h ahead of New York on summer time, 5 h on winter time; the lag is 30 s to 10 min.
    offset = synced - ordered
    assert offset.between(pd.Timedelta(hours=4, seconds=30), pd.Timedelta(hours=5, minutes=10)).all()
    # After the change: winter time in autumn, summer time in spring.
    after = ordered.dt.hour >= 4
    utc_ahead = pd.Timedelta(hours=5 if first_day.startswith("2025-11") else 4)
    assert (offset[after] - utc_ahead).between(pd.Timedelta(seconds=30), pd.Timedelta(seconds=600)).all()


def test_the_third_world_crosses_a_daylight_saving_change_and_the_year_end():
    world = FileScenarioWorld(SUITE_DIR.parent / "worlds" / "adspend" / "world.yaml").world
    history = [world.business_date(n) for n in range(world.spec.history_nights)]
    assert date(2025, 10, 26) in history  # the clocks go back in London
    change = world.night_frames(history.index(date(2025, 10, 26)))["AD_DELIVERY"]
    repeated = change[change["SERVED_AT"].dt.hour == 1]
    assert len(repeated) > 20  # served in the repeated hour, loaded in UTC a few minutes later
    lag = repeated["_LOADED_AT"] - (repeated["SERVED_AT"] - pd.Timedelta(hours=1))
    assert lag.between(pd.Timedelta(seconds=60), pd.Timedelta(seconds=900)).all()
    # Wider than ten columns: the local Snowflake's COPY INTO must load them all.
    assert len(world.tables["AD_DELIVERY"].columns) > 10
    nights = {world.business_date(n): world.rows_tonight("AD_DELIVERY", n) for n in range(60, 74)}
    assert nights[date(2025, 12, 25)] < 0.6 * nights[date(2025, 12, 23)]  # Christmas Day
    assert nights[date(2025, 12, 31)] > 1.1 * nights[date(2025, 12, 23)]  # the month-end flush


def test_steady_growth_grows_the_business_rows_not_a_fixed_count_lookup():
    # The ad-spend rates feed is one row per currency (count: 3); grown by 20%, it would repeat a currency
    # and fan the fact's join out: a duplication no business growth makes.
    scenario_world = FileScenarioWorld(SUITE_DIR.parent / "worlds" / "adspend" / "world.yaml")
    world = scenario_world.world
    night = world.spec.history_nights
    growth = scenario_world.parse_event({"kind": "steady_growth", "pct": 10, "since_night": 0}, night)
    factor = growth.growth(night + 1)
    assert factor == pytest.approx(1.21)
    assert world.rows_tonight("FX_RATES", night + 1, factor) == 3
    assert world.rows_tonight("AD_DELIVERY", night + 1, factor) > 1.2 * world.rows_tonight(
        "AD_DELIVERY", night + 1
    )


def test_a_month_end_counted_in_business_days_falls_on_the_last_working_days():
    from dw_local.scenarios.generic import _calendar_factor
    from dw_local.scenarios.world_file import RowCount

    stock_take = RowCount(per_night=50, month_end_factor=10, month_end_days=1, month_end_on="business")
    calendar = RowCount(per_night=50, month_end_factor=10, month_end_days=1)
    no_holidays = lambda day: False  # noqa: E731
    # November 2025 ends on a Sunday: the stock-take is on Friday 28th, not on the weekend.
    november = {d: _calendar_factor(stock_take, date(2025, 11, d), no_holidays) for d in (27, 28, 29, 30)}
    assert november == {27: 1, 28: 10, 29: 1, 30: 1}
    assert _calendar_factor(calendar, date(2025, 11, 30), no_holidays) == 10
    assert _calendar_factor(calendar, date(2025, 11, 28), no_holidays) == 1
    # A holiday on the month's last weekday moves the business month-end before it (two days: 29th and 30th).
    two = stock_take.model_copy(update={"month_end_days": 2})
    december = lambda day: day == date(2025, 12, 31)  # noqa: E731
    factors = {d: _calendar_factor(two, date(2025, 12, d), december) for d in (26, 29, 30, 31)}
    assert factors == {26: 1, 29: 10, 30: 10, 31: 1}
