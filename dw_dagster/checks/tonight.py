"""What every check's evaluation shares in a checks run, and what the run leaves to record.

A checks run reads what it judges against once (``HistorySession.night_context``), measures once
(``measure.py``), judges each check, and writes tonight's readings once (``HistorySession.record_night``):
a check says what to record and which series tonight flags, and the run writes them all together.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import dagster as dg

from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.history import HistorySession, Reading, Rebase, Recorded, left_out
from dw_dagster.checks.run_context import CheckRun
from dw_dagster.records.incidents import Finding, RecordOutcome
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource

Reporter = Callable[[Finding], RecordOutcome]
"""What records a failing check's finding on its incident, handed in by the step that runs the checks."""


@dataclass
class Night:
    context: dg.AssetCheckExecutionContext
    run: CheckRun
    warehouse: WarehouseResource
    ops: OpsSchema
    history: HistorySession
    cause_scopes: Mapping[str, str]
    calendar: BusinessCalendar
    levels: Mapping[str, list[Rebase]]
    incident_days: set[date]
    past: Mapping[str, dict[date, Recorded]]
    """Each series' history before tonight, read once for the run."""
    reporter: Reporter
    shares: Mapping[str, int] = field(default_factory=dict)
    """Asset key path -> how many series are judged on it (its volume, the totals on it): they share the
    table's false-alarm rate."""
    readings: dict[str, Reading] = field(default_factory=dict)
    """What tonight records, by series."""

    @property
    def day(self) -> date:
        return self.run.business_date

    def share(self, asset: str) -> int:
        return max(1, self.shares.get(asset, 1))

    def excluded(self, past: Mapping[date, Recorded]) -> set[date]:
        """The nights left out of a series' baselines (``history.left_out``)."""
        return left_out(past, self.incident_days)

    def record(self, series: str, reading: Reading) -> None:
        self.readings[series] = reading

    def flag(self, series: str) -> None:
        """Tonight is an incident's night for this series: kept, and left out of every later baseline."""
        self.readings[series] = self.readings[series].model_copy(update={"flagged": True})

    def report(self, check: str, asset: str, summary: str, evidence: dict[str, Any]) -> RecordOutcome:
        """Records a failing check's finding on its incident; the outcome's ``explained_by`` says the record
        explains it (the check should then report at WARN: it is not an incident)."""
        run = self.run
        scope = (
            f"job:{run.coalesce_job}" if run.coalesce_job else self.cause_scopes.get(asset, f"asset:{asset}")
        )
        return self.reporter(
            Finding(
                check_name=check,
                asset_key=asset,
                business_date=run.business_date,
                summary=summary,
                evidence=evidence,
                cause_scope=scope,
                dagster_run_id=run.dagster_run_id,
                coalesce_run_id=run.coalesce_run_id,
            )
        )

    def write(self) -> None:
        self.history.record_night(self.day, self.readings, self.run.dagster_run_id, self.run.coalesce_run_id)
