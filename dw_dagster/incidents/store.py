"""Durable incidents: one per cause, in the warehouse's ops schema.

A failing check hands a :class:`Finding` to :meth:`IncidentStore.record_finding`. Findings on the same
business date from the same Coalesce job share a cause (one green job that built several wrong numbers is
one incident, not one alert per check); a finding that repeats one already attached to an open incident
is a repeat, not news. Incident ids derive from the cause, and every write is a MERGE on a key, so
re-ticks, retried steps and restarts never duplicate an incident or an event.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, date, datetime
from typing import Any, Literal

from dw_dagster.incidents.models import Finding, Incident, IncidentEvent, RecordOutcome
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource


def incident_id_for(cause_key: str, business_date: date) -> str:
    digest = hashlib.sha256(cause_key.encode()).hexdigest()[:6]
    return f"INC-{business_date:%Y%m%d}-{digest}"


class IncidentStore:
    def __init__(self, warehouse: WarehouseResource, ops: OpsSchema, run_id: str | None = None):
        self.warehouse = warehouse
        self.ops = ops
        self.run_id = run_id

    def _connect(self, purpose: str):
        return self.ops.connect(self.warehouse, purpose, job="incidents", dagster_run_id=self.run_id)

    def record_finding(self, finding: Finding) -> RecordOutcome:
        with self._connect("incident.record") as conn:
            cur = conn.cursor()
            # A repeat of a finding already on an open incident stays with that incident.
            cur.execute(
                f"SELECT e.INCIDENT_ID FROM {self.ops.table('INCIDENT_EVENTS')} e"
                f" JOIN {self.ops.table('INCIDENTS')} i ON i.INCIDENT_ID = e.INCIDENT_ID"
                " WHERE i.STATUS = 'open' AND e.KIND = 'finding' AND e.EVENT_KEY LIKE %s"
                " ORDER BY i.OPENED_AT LIMIT 1",
                (f"{finding.signature}|%",),
            )
            row = cur.fetchone()
            now = datetime.now(UTC)
            if row:
                incident_id = row[0]
                new_incident = False
            else:
                cause_key = f"{finding.business_date.isoformat()}|{finding.cause_scope}"
                incident_id = incident_id_for(cause_key, finding.business_date)
                title = f"{finding.summary}"
                cur.execute(
                    f"MERGE INTO {self.ops.table('INCIDENTS')} t USING (SELECT %s AS INCIDENT_ID) s"
                    " ON t.INCIDENT_ID = s.INCIDENT_ID"
                    " WHEN NOT MATCHED THEN INSERT (INCIDENT_ID, CAUSE_KEY, STATUS, BUSINESS_DATE, TITLE,"
                    " SEVERITY, OPENED_AT, UPDATED_AT, DETAIL)"
                    " VALUES (%s, %s, 'open', %s, %s, %s, %s, %s, %s)",
                    (
                        incident_id,
                        incident_id,
                        cause_key,
                        finding.business_date,
                        title,
                        finding.severity,
                        now,
                        now,
                        json.dumps({"cause_scope": finding.cause_scope}),
                    ),
                )
                new_incident = cur.rowcount > 0
            event_key = f"{finding.signature}|{finding.business_date.isoformat()}"
            new_finding = self._append(
                cur, incident_id, event_key, "finding", finding.model_dump(mode="json"), now
            )
            if new_finding and not new_incident:
                cur.execute(
                    f"UPDATE {self.ops.table('INCIDENTS')} SET UPDATED_AT = %s WHERE INCIDENT_ID = %s",
                    (now, incident_id),
                )
            incident = self._get(cur, incident_id)
        assert incident is not None
        return RecordOutcome(incident=incident, new_incident=new_incident, new_finding=new_finding)

    def append_event(self, incident_id: str, kind: str, event_key: str, detail: dict[str, Any]) -> bool:
        """Appends an event once per ``event_key``; returns whether it was new."""
        with self._connect(f"incident.{kind}") as conn:
            return self._append(conn.cursor(), incident_id, event_key, kind, detail, datetime.now(UTC))

    def _append(
        self, cur: Any, incident_id: str, event_key: str, kind: str, detail: dict, now: datetime
    ) -> bool:
        cur.execute(
            f"MERGE INTO {self.ops.table('INCIDENT_EVENTS')} t"
            " USING (SELECT %s AS INCIDENT_ID, %s AS EVENT_KEY) s"
            " ON t.INCIDENT_ID = s.INCIDENT_ID AND t.EVENT_KEY = s.EVENT_KEY"
            " WHEN NOT MATCHED THEN INSERT (INCIDENT_ID, EVENT_KEY, KIND, EVENT_AT, DETAIL) VALUES (%s, %s, %s, %s, %s)",
            (incident_id, event_key, incident_id, event_key, kind, now, json.dumps(detail, default=str)),
        )
        return cur.rowcount > 0

    def set_status(self, incident_id: str, status: Literal["open", "resolved"]) -> None:
        with self._connect("incident.status") as conn:
            conn.cursor().execute(
                f"UPDATE {self.ops.table('INCIDENTS')} SET STATUS = %s, UPDATED_AT = %s WHERE INCIDENT_ID = %s",
                (status, datetime.now(UTC), incident_id),
            )

    def get(self, incident_id: str) -> Incident | None:
        with self._connect("incident.read") as conn:
            return self._get(conn.cursor(), incident_id)

    def _get(self, cur: Any, incident_id: str) -> Incident | None:
        rows = self._select(cur, "INCIDENT_ID = %s", (incident_id,))
        return rows[0] if rows else None

    def list(self, status: str | None = None) -> list[Incident]:
        with self._connect("incident.read") as conn:
            where, args = ("STATUS = %s", (status,)) if status else ("1 = 1", ())
            return self._select(conn.cursor(), where, args)

    def _select(self, cur: Any, where: str, args: tuple) -> list[Incident]:
        cur.execute(
            "SELECT INCIDENT_ID, CAUSE_KEY, STATUS, BUSINESS_DATE, TITLE, SEVERITY, OPENED_AT, UPDATED_AT, DETAIL"
            f" FROM {self.ops.table('INCIDENTS')} WHERE {where} ORDER BY OPENED_AT",
            args,
        )
        return [
            Incident(
                incident_id=r[0],
                cause_key=r[1],
                status=r[2],
                business_date=r[3],
                title=r[4] or "",
                severity=r[5] or "ERROR",
                opened_at=r[6],
                updated_at=r[7],
                detail=json.loads(r[8] or "{}"),
            )  # fmt: skip
            for r in cur.fetchall()
        ]

    def events(self, incident_id: str, kind: str | None = None) -> list[IncidentEvent]:
        with self._connect("incident.read") as conn:
            cur = conn.cursor()
            sql = (
                f"SELECT INCIDENT_ID, EVENT_KEY, KIND, EVENT_AT, DETAIL FROM {self.ops.table('INCIDENT_EVENTS')}"
                " WHERE INCIDENT_ID = %s"
            )
            args: tuple = (incident_id,)
            if kind:
                sql += " AND KIND = %s"
                args += (kind,)
            cur.execute(sql + " ORDER BY EVENT_AT", args)
            return [
                IncidentEvent(
                    incident_id=r[0], event_key=r[1], kind=r[2], at=r[3], detail=json.loads(r[4] or "{}")
                )
                for r in cur.fetchall()
            ]
