"""Durable incidents in the warehouse's ops schema: every finding and every change of status an event.

Grouping at finding time is provisional (``docs/incidents.md``). A failing check hands a :class:`Finding` to
:meth:`IncidentStore.record_finding`; the night's findings from one Coalesce job share a provisional
incident, in one of two lanes: ``new`` (the check was not failing on an open incident) or ``repeat`` (the same
check failed on an open incident of an earlier night). Nothing joins an older night's incident here: once
the diagnosis names the cause, ``lifecycle.settle`` either continues an older open incident with the same
cause (this one is then ``merged`` into it) or lets it stand as its own. A finding the record explains (the
row-count step of a verified fix) is attached to the fixed incident as ``explained`` and opens nothing.

Incident ids derive from the cause key (night, scope, lane) and every write is a MERGE on a key, so
re-ticks, retried steps and restarts never duplicate an incident or an event. A change of status writes its
``status`` event first (keyed, so a retry adds nothing) and then the row.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

from dw_dagster.incidents.explained import explanation_for, explanations
from dw_dagster.records.incidents import Finding, Incident, IncidentEvent, IncidentStatus, RecordOutcome
from dw_dagster.records.policy import IncidentPolicy
from dw_dagster.sql import placeholders
from dw_dagster.warehouse.connections import Connections
from dw_dagster.warehouse.ops import OpsSchema

SYSTEM = "dw-dagster"
"""Who changes a status when no person does (auto-resolve, a continuation, a reopening)."""
TRANSITIONS: dict[str, tuple[str, ...]] = {
    "open": ("resolved", "merged"),
    "resolved": ("open",),
    "merged": (),
}


class TransitionError(ValueError):
    """A change of status the lifecycle does not allow (e.g. reopening a merged incident)."""


def incident_id_for(cause_key: str, business_date: date) -> str:
    digest = hashlib.sha256(cause_key.encode()).hexdigest()[:6]
    return f"INC-{business_date:%Y%m%d}-{digest}"


RECENT_SLACK_DAYS = 2
"""Days beyond ``stale_after_nights`` a last finding may be from (a weekend without runs)."""


def recent_nights(policy: IncidentPolicy) -> int:
    """How many days back a cause's last finding still makes it going on tonight."""
    return max(1, policy.stale_after_nights) + RECENT_SLACK_DAYS


def finding_key(finding: Finding) -> str:
    return f"{finding.signature}|{finding.business_date.isoformat()}"


class IncidentStore:
    def __init__(
        self,
        warehouse: Connections,
        ops: OpsSchema,
        run_id: str | None = None,
        policy: IncidentPolicy | None = None,
    ):
        self.warehouse = warehouse
        self.ops = ops
        self.run_id = run_id
        self.policy = policy or IncidentPolicy()

    def _connect(self, purpose: str):
        return self.ops.connect(self.warehouse, purpose, job="incidents", dagster_run_id=self.run_id)

    # -- findings ----------------------------------------------------------------------------------

    def record_finding(self, finding: Finding, ancestors: Collection[str] = ()) -> RecordOutcome:
        """Records a finding on its provisional incident (or as explained); ``ancestors``: the asset keys
        upstream of the finding's asset, to match the tables a verified fix rebuilt."""
        with self._connect("incident.record") as conn:
            cur = conn.cursor()
            now = datetime.now(UTC)
            explained = explanation_for(finding, ancestors, explanations(self._receipts(cur), self.policy))
            if explained is not None:
                detail = {
                    **finding.model_dump(mode="json"),
                    "severity": "WARN",
                    "explained_by": explained.why,
                }
                new = self._append(
                    cur, explained.incident_id, f"explained|{finding_key(finding)}", "explained", detail, now
                )
                incident = self._get(cur, explained.incident_id)
                assert incident is not None
                return RecordOutcome(
                    incident=incident, new_incident=False, new_finding=new, explained_by=explained.why
                )
            lane = "repeat" if self._failing_on_an_earlier_night(cur, finding) else "new"
            cause_key = f"{finding.business_date.isoformat()}|{finding.cause_scope}"
            if lane == "repeat":
                cause_key += "|repeat"
            incident_id = incident_id_for(cause_key, finding.business_date)
            cur.execute(
                f"MERGE INTO {self.ops.table('INCIDENTS')} t USING (SELECT ? AS INCIDENT_ID) s"
                " ON t.INCIDENT_ID = s.INCIDENT_ID"
                " WHEN NOT MATCHED THEN INSERT (INCIDENT_ID, CAUSE_KEY, STATUS, BUSINESS_DATE, TITLE,"
                " SEVERITY, OPENED_AT, UPDATED_AT, DETAIL)"
                " VALUES (?, ?, 'open', ?, ?, ?, ?, ?, ?)",
                (
                    incident_id,
                    incident_id,
                    cause_key,
                    finding.business_date,
                    finding.summary,
                    finding.severity,
                    now,
                    now,
                    json.dumps({"cause_scope": finding.cause_scope, "lane": lane}),
                ),
            )
            new_incident = cur.rowcount > 0
            target = self._get(cur, incident_id)
            assert target is not None
            # A provisional incident merged into an older one: the night's later findings follow it there.
            while target.status == "merged" and target.merged_into:
                target = self._get(cur, target.merged_into) or target
            new_finding = self._append(
                cur, target.incident_id, finding_key(finding), "finding", finding.model_dump(mode="json"), now
            )
            reopened = False
            if new_finding and not new_incident:
                if target.status == "resolved":
                    # The same night's cause failing again after its resolution (a rerun the fix did not
                    # repair): the incident is not over.
                    self._transition(
                        cur,
                        target,
                        "open",
                        by=SYSTEM,
                        key=f"reopen|{finding_key(finding)}",
                        reason=f"a new finding after its resolution: {finding.summary}",
                        detail={"reopened": int(target.detail.get("reopened", 0)) + 1},
                    )
                    reopened = True
                else:
                    self._touch(cur, target.incident_id, now)
            target = self._get(cur, target.incident_id)
        assert target is not None
        return RecordOutcome(
            incident=target, new_incident=new_incident, new_finding=new_finding, reopened=reopened
        )

    def _failing_on_an_earlier_night(self, cur: Any, finding: Finding) -> bool:
        """Whether the check was failing on one of the last few nights (an open incident's finding within the
        nights a cause stays recent, ``recent_nights``): a check that failed weeks ago on an incident a
        cumulative total keeps open is news tonight, in its own lane."""
        prefix = f"{finding.signature}|"
        since = finding.business_date - timedelta(days=recent_nights(self.policy))
        cur.execute(
            f"SELECT 1 FROM {self.ops.table('INCIDENT_EVENTS')} e"
            f" JOIN {self.ops.table('INCIDENTS')} i ON i.INCIDENT_ID = e.INCIDENT_ID"
            " WHERE i.STATUS = 'open' AND e.KIND = 'finding' AND STARTSWITH(e.EVENT_KEY, ?)"
            " AND e.EVENT_KEY >= ? AND e.EVENT_KEY < ? LIMIT 1",
            (prefix, f"{prefix}{since.isoformat()}", finding_key(finding)),
        )
        return cur.fetchone() is not None

    def add_findings(self, incident_id: str, findings: Sequence[Finding]) -> int:
        """Attaches findings (a continued night's) to an incident; returns how many were new to it."""
        with self._connect("incident.continue") as conn:
            cur = conn.cursor()
            now = datetime.now(UTC)
            added = sum(
                self._append(cur, incident_id, finding_key(f), "finding", f.model_dump(mode="json"), now)
                for f in findings
            )
            if added:
                self._touch(cur, incident_id, now)
            return added

    def findings_recorded(self, keys: Collection[str]) -> set[str]:
        """Which of these finding keys (``check@asset|date``) a finding was recorded under, on any incident."""
        if not keys:
            return set()
        with self._connect("incident.read") as conn:
            cur = conn.cursor()
            cur.execute(
                f"SELECT DISTINCT EVENT_KEY FROM {self.ops.table('INCIDENT_EVENTS')} WHERE KIND = 'finding'"
                f" AND EVENT_KEY IN ({placeholders(len(keys))})",
                tuple(keys),
            )
            return {r[0] for r in cur.fetchall()}

    def _receipts(self, cur: Any) -> list[tuple[Incident, dict[str, Any], dict[str, Any] | None, list[str]]]:
        """Each recent receipt with its incident, that incident's latest diagnosis and its finding keys."""
        cur.execute(
            f"SELECT INCIDENT_ID, DETAIL FROM {self.ops.table('INCIDENT_EVENTS')} WHERE KIND = 'receipt'"
            " ORDER BY EVENT_AT DESC LIMIT 20"
        )
        out = []
        for incident_id, raw in cur.fetchall():
            incident = self._get(cur, incident_id)
            if incident is None:
                continue
            events = self._events(cur, incident_id, ("diagnosis", "finding"))
            diagnoses = [e.detail for e in events if e.kind == "diagnosis"]
            findings = [e.event_key for e in events if e.kind == "finding"]
            out.append((incident, json.loads(raw or "{}"), diagnoses[-1] if diagnoses else None, findings))
        return out

    # -- events ------------------------------------------------------------------------------------

    def append_event(self, incident_id: str, kind: str, event_key: str, detail: dict[str, Any]) -> bool:
        """Appends an event once per ``event_key``; returns whether it was new."""
        with self._connect(f"incident.{kind}") as conn:
            return self._append(conn.cursor(), incident_id, event_key, kind, detail, datetime.now(UTC))

    def _append(
        self, cur: Any, incident_id: str, event_key: str, kind: str, detail: dict, now: datetime
    ) -> bool:
        cur.execute(
            f"MERGE INTO {self.ops.table('INCIDENT_EVENTS')} t"
            " USING (SELECT ? AS INCIDENT_ID, ? AS EVENT_KEY) s"
            " ON t.INCIDENT_ID = s.INCIDENT_ID AND t.EVENT_KEY = s.EVENT_KEY"
            " WHEN NOT MATCHED THEN INSERT (INCIDENT_ID, EVENT_KEY, KIND, EVENT_AT, DETAIL) VALUES (?, ?, ?, ?, ?)",
            (incident_id, event_key, incident_id, event_key, kind, now, json.dumps(detail, default=str)),
        )
        return cur.rowcount > 0

    def _touch(self, cur: Any, incident_id: str, now: datetime) -> None:
        cur.execute(
            f"UPDATE {self.ops.table('INCIDENTS')} SET UPDATED_AT = ? WHERE INCIDENT_ID = ?",
            (now, incident_id),
        )

    def events(self, incident_id: str, kind: str | None = None) -> list[IncidentEvent]:
        with self._connect("incident.read") as conn:
            return self._events(conn.cursor(), incident_id, (kind,) if kind else ())

    def _events(self, cur: Any, incident_id: str, kinds: Sequence[str] = ()) -> list[IncidentEvent]:
        sql = (
            f"SELECT INCIDENT_ID, EVENT_KEY, KIND, EVENT_AT, DETAIL FROM {self.ops.table('INCIDENT_EVENTS')}"
            " WHERE INCIDENT_ID = ?"
        )
        if kinds:
            sql += f" AND KIND IN ({placeholders(len(kinds))})"
        cur.execute(sql + " ORDER BY EVENT_AT, EVENT_KEY", (incident_id, *kinds))
        return [
            IncidentEvent(
                incident_id=r[0], event_key=r[1], kind=r[2], at=r[3], detail=json.loads(r[4] or "{}")
            )
            for r in cur.fetchall()
        ]

    def latest_events(self, kind: str, limit: int = 1) -> list[IncidentEvent]:
        """The latest events of one kind across every incident, newest first."""
        with self._connect("incident.read") as conn:
            cur = conn.cursor()
            cur.execute(
                f"SELECT INCIDENT_ID, EVENT_KEY, KIND, EVENT_AT, DETAIL FROM {self.ops.table('INCIDENT_EVENTS')}"
                " WHERE KIND = ? ORDER BY EVENT_AT DESC LIMIT ?",
                (kind, limit),
            )
            return [
                IncidentEvent(
                    incident_id=r[0], event_key=r[1], kind=r[2], at=r[3], detail=json.loads(r[4] or "{}")
                )
                for r in cur.fetchall()
            ]

    # -- status ------------------------------------------------------------------------------------

    def transition(
        self,
        incident_id: str,
        to: IncidentStatus,
        *,
        by: str,
        reason: str,
        key: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> Incident | None:
        """Moves an incident to ``to`` (recorded as a ``status`` event); ``None`` when it is already there.

        ``key`` makes the event idempotent (a retried step records the change once); ``detail`` is merged
        into the incident's lifecycle attributes. Raises :class:`TransitionError` for a change the lifecycle
        does not allow and ``KeyError`` for an unknown incident.
        """
        with self._connect("incident.status") as conn:
            cur = conn.cursor()
            incident = self._get(cur, incident_id)
            if incident is None:
                raise KeyError(f"incident {incident_id}: not found in {self.ops.table('INCIDENTS')}")
            return self._transition(cur, incident, to, by=by, reason=reason, key=key, detail=detail)

    def _transition(
        self,
        cur: Any,
        incident: Incident,
        to: str,
        *,
        by: str,
        reason: str,
        key: str | None,
        detail: Mapping[str, Any] | None,
    ) -> Incident | None:
        if incident.status == to:
            return None
        if to not in TRANSITIONS[incident.status]:
            raise TransitionError(
                f"incident {incident.incident_id} is {incident.status}: it cannot become {to} "
                f"(from {incident.status}: {', '.join(TRANSITIONS[incident.status]) or 'no change'})"
            )
        now = datetime.now(UTC)
        self._append(
            cur,
            incident.incident_id,
            f"status|{to}|{key or now.isoformat()}",
            "status",
            {"from": incident.status, "to": to, "by": by, "reason": reason, **(detail or {})},
            now,
        )
        cur.execute(
            f"UPDATE {self.ops.table('INCIDENTS')} SET STATUS = ?, UPDATED_AT = ?, DETAIL = ?"
            " WHERE INCIDENT_ID = ? AND STATUS = ?",
            (
                to,
                now,
                json.dumps({**incident.detail, **(detail or {})}, default=str),
                incident.incident_id,
                incident.status,
            ),
        )
        return self._get(cur, incident.incident_id)

    def set_status(
        self, incident_id: str, status: IncidentStatus, *, by: str = SYSTEM, reason: str = ""
    ) -> None:
        """A change of status by a step that needs no key of its own (e.g. a verified remediation)."""
        self.transition(incident_id, status, by=by, reason=reason or f"set {status}")

    def update_detail(self, incident_id: str, **fields: Any) -> None:
        """Merges lifecycle attributes (dedup key, related incidents, stale mark) into the incident."""
        with self._connect("incident.detail") as conn:
            cur = conn.cursor()
            incident = self._get(cur, incident_id)
            if incident is None:
                raise KeyError(f"incident {incident_id}: not found in {self.ops.table('INCIDENTS')}")
            cur.execute(
                f"UPDATE {self.ops.table('INCIDENTS')} SET DETAIL = ? WHERE INCIDENT_ID = ?",
                (json.dumps({**incident.detail, **fields}, default=str), incident_id),
            )

    def downgrade(self, incident_id: str, title: str, reason: str) -> bool:
        """Makes an incident a WARN with ``title`` (its cause could not be told: thin evidence is no ERROR),
        its findings WARN with it; a ``severity`` event says why. Returns whether it changed."""
        with self._connect("incident.severity") as conn:
            cur = conn.cursor()
            incident = self._get(cur, incident_id)
            if incident is None:
                return False
            now = datetime.now(UTC)
            changed = incident.severity != "WARN"
            if changed:
                self._append(
                    cur,
                    incident_id,
                    "severity|WARN",
                    "severity",
                    {"from": incident.severity, "to": "WARN", "by": SYSTEM, "reason": reason},
                    now,
                )
                cur.execute(
                    f"UPDATE {self.ops.table('INCIDENTS')} SET SEVERITY = ?, TITLE = ?, UPDATED_AT = ?"
                    " WHERE INCIDENT_ID = ?",
                    ("WARN", title, now, incident_id),
                )
            # Findings that joined since (the same night's later checks) take the incident's severity too.
            for e in self._events(cur, incident_id, ("finding",)):
                if e.detail.get("severity") == "WARN":
                    continue
                cur.execute(
                    f"UPDATE {self.ops.table('INCIDENT_EVENTS')} SET DETAIL = ?"
                    " WHERE INCIDENT_ID = ? AND EVENT_KEY = ?",
                    (json.dumps({**e.detail, "severity": "WARN"}, default=str), incident_id, e.event_key),
                )
            return changed

    # -- reads -------------------------------------------------------------------------------------

    def get(self, incident_id: str) -> Incident | None:
        with self._connect("incident.read") as conn:
            return self._get(conn.cursor(), incident_id)

    def _get(self, cur: Any, incident_id: str) -> Incident | None:
        rows = self._select(cur, "INCIDENT_ID = ?", (incident_id,))
        return rows[0] if rows else None

    def list(self, status: str | Sequence[str] | None = None) -> list[Incident]:
        with self._connect("incident.read") as conn:
            if status is None:
                return self._select(conn.cursor(), "1 = 1", ())
            statuses = (status,) if isinstance(status, str) else tuple(status)
            return self._select(conn.cursor(), f"STATUS IN ({placeholders(len(statuses))})", statuses)

    def _select(self, cur: Any, where: str, args: tuple) -> list[Incident]:
        cur.execute(
            "SELECT INCIDENT_ID, CAUSE_KEY, STATUS, BUSINESS_DATE, TITLE, SEVERITY, OPENED_AT, UPDATED_AT, DETAIL"
            f" FROM {self.ops.table('INCIDENTS')} WHERE {where} ORDER BY OPENED_AT, INCIDENT_ID",
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
            )
            for r in cur.fetchall()
        ]
