"""Accepted levels the record explains: a verified remediation re-bases what it changed.

A verified fix changes numbers on purpose (the rows of the key it mapped come back). The fix's receipt is
an event of its incident (``INCIDENT_EVENTS``, kind ``receipt``); from the night after the incident's, every
series of the incident's assets and of everything downstream of them is judged at its new level. Each such
level is recorded once in ``BASELINE_LEVELS`` (kind ``remediation``) and shown on the check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, date, datetime, timedelta

import dagster as dg

from dw_dagster.checks.history import FixedIncident, HistorySession, Rebase

# Receipts are looked for on incidents changed this recently: a fix is seen by the checks run of its rerun
# or, at the latest, by the next nights'.
RECENT_DAYS = 3


def remediation_levels(
    history: HistorySession,
    fixed: Iterable[FixedIncident],
    day: date,
    series_of: Callable[[str], Iterable[str]],
    downstream: Callable[[str], set[str]],
) -> list[Rebase]:
    """Records a ``remediation`` level for every series of the assets a verified fix changed; returns the
    new ones. ``fixed``: the incidents with a receipt (``HistorySession.night_context``); ``series_of(asset)``
    names the series this check keeps for an asset."""
    since = datetime.now(UTC) - timedelta(days=RECENT_DAYS)
    new = []
    for incident in fixed:
        updated = (
            incident.updated_at if incident.updated_at.tzinfo else incident.updated_at.replace(tzinfo=UTC)
        )
        if updated < since or incident.business_date >= day or not incident.verified:
            continue
        affected = set()
        for asset in incident.assets:
            affected |= {asset, *downstream(asset)}
        for asset in sorted(affected):
            for series in series_of(asset):
                rebase = Rebase(
                    series=series,
                    from_date=incident.business_date + timedelta(days=1),
                    kind="remediation",
                    reason=f"verified fix of {incident.incident_id}",
                )
                if history.record_rebase(rebase):
                    new.append(rebase)
    return new


class LazyLineage:
    """The asset graph, built on first use: most nights need no walk, and a large graph takes seconds."""

    def __init__(self, specs: Sequence[dg.AssetSpec]):
        self._specs = list(specs)
        self._graph = None

    def _get(self):
        if self._graph is None:
            from dw_dagster.context.lineage import LineageGraph

            self._graph = LineageGraph(self._specs)
        return self._graph

    def graph(self):
        return self._get()

    def upstream(self, key: str) -> set[str]:
        graph = self._get()
        return graph.upstream(key) if key in graph else set()

    def downstream(self, key: str) -> set[str]:
        graph = self._get()
        return graph.downstream(key) if key in graph else set()
