"""The business calendar: holidays by country and subdivision, the team's own dates, period ends counted
in business days, days of the month; and the errors a malformed calendar gets."""

from __future__ import annotations

from datetime import date

import pytest
import yaml

from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.metrics import load_metrics_file
from dw_dagster.config import DwConfigError


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
    ],
)
def test_a_malformed_calendar_names_the_file_and_field(tmp_path, calendar, field):
    path = tmp_path / "metrics.yaml"
    path.write_text(yaml.safe_dump({"calendar": calendar}))
    with pytest.raises(DwConfigError) as e:
        load_metrics_file(path)
    assert str(path) in str(e.value) and field in str(e.value)
