"""The business calendar: holidays by country and subdivision, the team's own dates, period ends counted
in business days, days of the month; and the errors a malformed calendar gets."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
import yaml

from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.metrics import load_metrics_file
from dw_dagster.config import DwConfigError

EVERY_DAY = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]


def _cal(**kw) -> BusinessCalendar:
    return BusinessCalendar.model_validate(kw)


def test_public_holidays_by_country_and_subdivision():
    cal = _cal(holidays=[{"country": "US", "subdivision": "NY"}])
    memorial = cal.day(date(2025, 5, 26))
    assert memorial is not None and memorial.kind == "holiday" and memorial.name == "Memorial Day"
    # A state holiday of New York that is not federal.
    assert cal.day(date(2025, 2, 12)) is not None
    assert _cal(holidays=[{"country": "US"}]).day(date(2025, 2, 12)) is None
    assert cal.day(date(2025, 5, 27)) is None


def test_explicit_dates_and_days_of_the_month():
    cal = _cal(
        dates=[{"date": "2025-06-02", "name": "Stocktake", "direction": "down"}],
        day_of_month=[{"name": "payday", "days": [15, 31]}],
    )
    stocktake = cal.day(date(2025, 6, 2))
    assert stocktake.name == "Stocktake" and stocktake.explains(-0.3) and not stocktake.explains(0.3)
    assert cal.day(date(2025, 6, 15)).like_keys == ("day_of_month:payday",)
    # A team's own date is compared with its own past occurrences, not with public holidays.
    assert stocktake.like_keys == ("date:Stocktake",)
    assert _cal(holidays=[{"country": "US"}]).day(date(2025, 5, 26)).like_keys == ("holiday",)
    # 31 means the last day of a shorter month.
    assert cal.day(date(2025, 6, 30)).name == "payday"
    assert cal.day(date(2025, 6, 16)) is None


def test_month_end_is_the_last_business_days_and_quarter_end_falls_back_to_month_ends():
    weekdays = _cal(holidays=[{"country": "US"}], month_end={"last_business_days": 2},
                    quarter_end={"last_business_days": 3})  # fmt: skip
    # May 2025 ends on a Saturday: the last two business days are Thursday 29 and Friday 30.
    assert [d for d in range(26, 32) if weekdays.day(date(2025, 5, d))] == [26, 29, 30]  # 26: Memorial Day
    assert weekdays.day(date(2025, 5, 29)).kind == "month_end"
    june = weekdays.day(date(2025, 6, 26))
    assert june.kind == "quarter_end" and june.like_keys == ("quarter_end", "month_end")
    # A shop open every day: the month ends on its last two calendar days.
    every_day = _cal(
        business_days=["mon", "tue", "wed", "thu", "fri", "sat", "sun"], month_end={"last_business_days": 2}
    )
    assert [d for d in range(28, 32) if every_day.day(date(2025, 5, d))] == [30, 31]


def test_a_day_explains_only_a_deviation_within_its_size():
    cal = _cal(month_end={"last_business_days": 1, "max_effect_pct": 40, "direction": "up"})
    day = cal.day(date(2025, 4, 30))
    assert day.explains(0.35) and not day.explains(0.45) and not day.explains(-0.2)


@pytest.mark.parametrize(
    ("calendar", "field"),
    [
        ({"holidays": [{"country": "XX"}]}, "calendar.holidays.0"),
        ({"holidays": [{"country": "US", "subdivision": "ZZ"}]}, "calendar.holidays.0"),
        ({"business_days": ["mon", "funday"]}, "calendar.business_days.1"),
        ({"month_end": {"last_business_days": 11}}, "calendar.month_end.last_business_days"),
        ({"day_of_month": [{"name": "payday", "days": [0]}]}, "calendar.day_of_month.0.days"),
        ({"dates": [{"date": "2025-06-02", "name": "a"}, {"date": "2025-06-02", "name": "b"}]}, "calendar"),
        ({"holiday": []}, "calendar.holiday"),
        ({"dates": [{"date": "2025-12-24", "until": "2025-12-20", "name": "a"}]}, "calendar.dates.0"),
        (
            {
                "dates": [
                    {"date": "2025-12-24", "until": "2025-12-27", "name": "a"},
                    {"date": "2025-12-26", "name": "b"},
                ]
            },
            "calendar",
        ),
        ({"holiday_period": {"bridge_days": 30}}, "calendar.holiday_period.bridge_days"),
    ],
)
def test_a_malformed_calendar_names_the_file_and_field(tmp_path, calendar, field):
    path = tmp_path / "metrics.yaml"
    path.write_text(yaml.safe_dump({"calendar": calendar}))
    with pytest.raises(DwConfigError) as e:
        load_metrics_file(path)
    assert str(path) in str(e.value) and field in str(e.value)


def _kinds(cal: BusinessCalendar, first: date, last: date) -> dict[date, str]:
    out, d = {}, first
    while d <= last:
        day = cal.day(d)
        out[d] = "-" if day is None else day.kind if day.kind != "holiday_period" else day.like_keys[0]
        d += timedelta(days=1)
    return out


def test_holidays_close_together_make_a_period_with_the_days_between_and_the_ramp_back_after():
    gb = _cal(holidays=[{"country": "GB", "subdivision": "ENG"}])
    kinds = _kinds(gb, date(2025, 12, 24), date(2026, 1, 6))
    assert kinds[date(2025, 12, 24)] == "-"  # before the period: an ordinary day
    assert kinds[date(2025, 12, 25)] == kinds[date(2025, 12, 26)] == kinds[date(2026, 1, 1)] == "holiday"
    # The weekend and the working days between Boxing Day and New Year's Day.
    assert {kinds[date(2025, 12, d)] for d in range(27, 32)} == {"holiday_period"}
    # The first two business days after (Friday 2, then Monday 5 January: the weekend is not one).
    assert kinds[date(2026, 1, 2)] == kinds[date(2026, 1, 5)] == "after_holidays"
    assert kinds[date(2026, 1, 3)] == "-" and kinds[date(2026, 1, 6)] == "-"
    between = gb.day(date(2025, 12, 29))
    assert between.name == "between holidays (Christmas Day 2025-12-25 to New Year's Day 2026-01-01)"
    # A country of another calendar: Easter in Germany, Good Friday to Easter Monday.
    de = _cal(holidays=[{"country": "DE"}], business_days=EVERY_DAY)
    easter = _kinds(de, date(2025, 4, 17), date(2025, 4, 24))
    assert [easter[date(2025, 4, d)] for d in range(17, 25)] == [
        "-", "holiday", "holiday_period", "holiday_period", "holiday", "after_holidays", "after_holidays", "-"
    ]  # fmt: skip
    # A month-end in a period: the days between come first, the ramp back after comes second.
    stocktake = [{"date": "2026-01-27", "until": "2026-01-28", "name": "Stocktake"}]
    with_month_end = _cal(holidays=[{"country": "GB"}], month_end={"last_business_days": 2}, dates=stocktake)
    assert with_month_end.day(date(2025, 12, 30)).kind == "holiday_period"
    assert (
        with_month_end.day(date(2026, 1, 29)).kind
        == with_month_end.day(date(2026, 1, 30)).kind
        == "month_end"
    )
    assert _cal(dates=stocktake).day(date(2026, 1, 29)).like_keys == ("after_holidays",)
    # A holiday on its own makes no period (Memorial Day), and bridge_days 0 turns periods off.
    us = _cal(holidays=[{"country": "US"}])
    assert us.day(date(2025, 5, 27)) is None
    off = _cal(holidays=[{"country": "GB"}], holiday_period={"bridge_days": 0})
    assert off.day(date(2025, 12, 29)) is None and off.day(date(2025, 12, 25)).kind == "holiday"


def test_an_office_closed_for_days_is_a_holiday_each_day_and_a_period():
    cal = _cal(
        dates=[{"date": "2025-08-04", "until": "2025-08-15", "name": "Summer shutdown", "direction": "down"}]
    )
    assert cal.day(date(2025, 8, 3)) is None
    assert all(cal.day(date(2025, 8, d)).name == "Summer shutdown" for d in range(4, 16))
    # Each day of the closure is like the closure's days before it, not like public holidays.
    assert cal.day(date(2025, 8, 11)).like_keys == ("date:Summer shutdown",)
    assert cal.day(date(2025, 8, 18)).like_keys == ("after_holidays",)


def test_a_calendar_with_no_holidays_takes_those_of_the_business_days_country(tmp_path):
    path = tmp_path / "metrics.yaml"
    path.write_text(yaml.safe_dump({"business_day": {"timezone": "Europe/London"}}))
    boxing_day = load_metrics_file(path).calendar.day(date(2025, 12, 26))
    # Holidays nobody declared explain a dip, never a jump.
    assert boxing_day.name == "Boxing Day" and boxing_day.explains(-0.5) and not boxing_day.explains(0.5)
    path.write_text(yaml.safe_dump({"business_day": {"timezone": "America/Chicago"}, "calendar": {}}))
    assert load_metrics_file(path).calendar.day(date(2025, 11, 27)).name == "Thanksgiving Day"
    # Said to have none, or a zone of no country: none.
    path.write_text(
        yaml.safe_dump({"business_day": {"timezone": "Europe/London"}, "calendar": {"holidays": []}})
    )
    assert load_metrics_file(path).calendar.day(date(2025, 12, 26)) is None
    path.write_text(yaml.safe_dump({"business_day": {"timezone": "UTC"}}))
    assert load_metrics_file(path).calendar.empty
