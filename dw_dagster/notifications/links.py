"""Links into the Dagster UI: every message links to the exact run it speaks of, and to the incident's runs.

``DAGSTER_UI_URL`` sets the base (default the local ``dagster dev``, ``http://localhost:3000``). An
incident's runs are found by their ``dw/incident_id`` tag: the UI's runs page takes the same filter a
person types there (``tag:dw/incident_id=INC-...``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from slack_sdk.models.blocks import ActionsBlock, ButtonElement, PlainTextObject

from dw_dagster.tags import INCIDENT_ID

DEFAULT_DAGSTER_UI_URL = "http://localhost:3000"


def dagster_ui_url(env: Mapping[str, str] | None = None) -> str:
    """The Dagster UI's base URL for links: ``DAGSTER_UI_URL``, else the local ``dagster dev`` default."""
    env = os.environ if env is None else env
    return (env.get("DAGSTER_UI_URL") or DEFAULT_DAGSTER_UI_URL).rstrip("/")


@dataclass(frozen=True)
class DagsterLinks:
    base_url: str = DEFAULT_DAGSTER_UI_URL

    @property
    def _base(self) -> str:
        return self.base_url.rstrip("/")

    def run(self, run_id: str) -> str:
        return f"{self._base}/runs/{quote(run_id)}"

    def incident_runs(self, incident_id: str) -> str:
        """The runs tagged with the incident (its checks findings' diagnosis, its remediation)."""
        return f"{self._base}/runs?{urlencode({'q[]': f'tag:{INCIDENT_ID}={incident_id}'})}"

    def best(self, incident_id: str, run_id: str | None) -> str:
        """The run a message speaks of, else the incident's runs."""
        return self.run(run_id) if run_id else self.incident_runs(incident_id)


def short_run(run_id: str) -> str:
    """A run id as the Dagster UI shows it (its first eight characters)."""
    return run_id[:8]


def dagster_buttons(
    links: DagsterLinks, incident_id: str, run_id: str | None, run_label: str = "Open run in Dagster"
) -> ActionsBlock:
    """Link buttons: the run the message speaks of (when known) and the incident's runs."""
    buttons = []
    if run_id:
        buttons.append(
            ButtonElement(
                text=PlainTextObject(text=run_label),
                url=links.run(run_id),
                action_id="dw_open_run",
                style="primary",
            )
        )
    buttons.append(
        ButtonElement(
            text=PlainTextObject(text="Incident in Dagster"),
            url=links.incident_runs(incident_id),
            action_id="dw_open_incident",
            **({} if run_id else {"style": "primary"}),
        )
    )
    return ActionsBlock(elements=buttons)
