"""Plays a world's nights one by one through the real machinery (Coalesce job on the simulator, run sensor,
checks, incident sensor, diagnosis) and hands back what each night's new incidents were diagnosed as.

Faults are the scenario vocabulary's events (``local/dw_local/scenarios/events.py``), parsed against the world
like a scenario file's, or an event object a test defines for a fault the vocabulary does not have yet;
``sql`` changes the world's tables directly.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from world_cache import running_copy

from dw_dagster.checks.metrics import load_metrics_file
from dw_dagster.incidents.events import latest_diagnosis
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.incidents import BlastRadius, Diagnosis, Finding, Incident
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.daemon import LocalDaemon, TickOutcome
from dw_local.scenarios.event_base import Event
from dw_local.scenarios.worlds import ScenarioWorld, open_world
from dw_local.world import LOCAL_SNOWFLAKE_PASSWORD, password_variables

HERE = Path(__file__).resolve().parent
METERS = HERE / "worlds" / "meters" / "world.yaml"
ECOMMERCE = HERE.parent.parent / "local" / "dw_local" / "scenarios" / "worlds" / "ecommerce" / "world.yaml"


@dataclass
class Diagnosed:
    incident: Incident
    diagnosis: Diagnosis
    radius: BlastRadius
    outcome: TickOutcome

    @property
    def labels(self) -> list[str]:
        return [k.label for k in self.diagnosis.keys]


class Nights:
    def __init__(self, world: str | Path, tmp: Path):
        self.world: ScenarioWorld = open_world(str(world), Path.cwd())
        self._running = ExitStack()
        self.lw = self._running.enter_context(running_copy(self.world, tmp))
        env = dict(self.world.env())
        context = Path(env.get("DW_CONTEXT_FILE") or self.lw.env()["DW_CONTEXT_FILE"])
        env.update({name: LOCAL_SNOWFLAKE_PASSWORD for name in password_variables(context)})
        self.daemon = LocalDaemon(self.lw, env=env)
        metrics = load_metrics_file(self.daemon.settings.metrics_file)
        self.ops = OpsSchema(self.world.database, metrics.ops_schema)
        self.store = IncidentStore(self.daemon.defs.resources["snowflake"], self.ops)
        self.night = self.world.history_nights

    def event(self, raw: dict[str, Any]) -> Any:
        return self.world.parse_event(raw, self.world.history_nights)

    def play(self, *events: Any) -> list[Diagnosed]:
        """Plays the next night with ``events`` (raw dicts or event objects); the incidents it opened."""
        before = {i.incident_id for i in self.store.list()}
        parsed = [self.event(e) if isinstance(e, dict) else e for e in events]
        self.world.play_night(self.lw, self.night, parsed)
        self.night += 1
        outcome = self.daemon.tick()
        out = []
        for incident in self.store.list():
            if incident.incident_id in before:
                continue
            found = latest_diagnosis(self.store, incident.incident_id)
            assert found is not None, f"{incident.incident_id} was not diagnosed"
            out.append(Diagnosed(incident, *found, outcome))
        return out

    def diagnose(self, finding: Finding) -> Diagnosis:
        """The diagnosis of an incident opened by ``finding`` alone, over this world's warehouse: what the
        diagnosis job computes for a finding the checks have not raised yet."""
        from dw_dagster.app.components import ref_resolver
        from dw_dagster.checks.history import HistorySession
        from dw_dagster.context.lineage import LineageGraph
        from dw_dagster.incidents.diagnosis import DiagnosisContext, diagnose

        specs = self.daemon.defs.resolve_all_asset_specs()
        graph = LineageGraph(specs)
        now = datetime.now(UTC)
        incident = Incident(incident_id="INC-TEST", cause_key="test", status="open", title=finding.summary,
                            business_date=finding.business_date, severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip
        # Bound server-side, as the product's own connections bind (warehouse/connections.py).
        with self.lw.snowflake.connect(database=self.world.database, paramstyle="qmark") as conn:
            ctx = DiagnosisContext(graph, load_metrics_file(self.daemon.settings.metrics_file), ref_resolver(specs),
                                   HistorySession(conn, self.ops), conn.cursor())  # fmt: skip
            return diagnose(incident, [finding], ctx)

    def resolve(self) -> None:
        for incident in self.store.list(status="open"):
            self.store.set_status(incident.incident_id, "resolved")

    def repair(self, event: Any) -> None:
        self.world.repair(self.lw, self.event(event) if isinstance(event, dict) else event)

    def sql(self, statement: str, params: Any = None) -> list[tuple]:
        with self.lw.snowflake.connect(database=self.world.database) as conn:
            cur = conn.cursor()
            cur.execute(statement, params)
            try:
                return list(cur.fetchall())
            except Exception:  # noqa: BLE001 - a statement that returns no rows
                return []

    def close(self) -> None:
        self._running.close()


class SignFlip(Event):
    """A source column's values (rows matching ``where``) arrive with the opposite sign: the scenario
    vocabulary's unit_change takes positive factors only, so this test plays the negative one."""

    kind: Literal["test_sign_flip"] = "test_sign_flip"
    table_load: ClassVar[Literal["night", "once"] | None] = "night"
    table: str
    column: str
    where: dict[str, Any]

    def transform(self, world, frames, night):
        frame = frames[self.table].copy()
        rows = np.ones(len(frame), dtype=bool)
        for column, value in self.where.items():
            rows &= (frame[column] == value).to_numpy()
        frame[self.column] = frame[self.column].astype(float)
        frame.loc[rows, self.column] = -frame.loc[rows, self.column]
        return {**frames, self.table: frame}
