"""Who sent a query, from its Snowflake query tag.

Coalesce tags every statement of a Job run with a JSON tag ``{"coalesce": {"jobName", "nodeID", "nodeName",
"runID", "runType", "stageName", "storageLocation"}}`` (docs/cost.md); dw-dagster tags its own with
``{"app": "dw-dagster", "purpose", "check" | "job", "asset", "dagster_run_id"}``
(``dw_dagster/warehouse/resources.py``). Anything else is another spender, named by its raw tag.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel

from dw_dagster.warehouse.connections import QUERY_TAG_APP

SpenderKind = Literal["coalesce", "dw-dagster", "other"]


class QueryOrigin(BaseModel, frozen=True):
    """What one query tag says about the query's sender."""

    kind: SpenderKind
    job: str | None = None
    """The Coalesce Job's name, or the dw-dagster job (``diagnose_incident``...)."""
    node_id: str | None = None
    node: str | None = None
    location: str | None = None
    run_id: str | None = None
    """The Coalesce run id, or the Dagster run id."""
    stage: str | None = None
    """The statement's stage in a Coalesce run (``Insert Data``, a test), or dw-dagster's purpose."""
    check: str | None = None
    asset: str | None = None
    raw: str | None = None

    @property
    def spender(self) -> str:
        """The line a person reads in the report."""
        if self.kind == "coalesce":
            if not (self.node or self.node_id):
                return (
                    f"job {self.job}, outside its nodes" if self.job else f"coalesce run {self.run_id or '?'}"
                )
            where = f"{self.location}.{self.node}" if self.location else (self.node or self.node_id or "?")
            return f"node {where}"
        if self.kind == "dw-dagster":
            if self.check:
                return f"check {self.check}"
            if self.stage == "job.diagnose":
                return "diagnosis"
            return f"dw-dagster {self.job or self.stage}"
        return f"untagged ({self.raw})" if self.raw else "untagged"


def parse_query_tag(tag: str | None) -> QueryOrigin:
    """The origin a tag names; a tag that is not one of the two shapes is ``other`` (never an error: the
    account runs queries from every tool)."""
    text = (tag or "").strip()
    try:
        data = json.loads(text) if text.startswith("{") else None
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("coalesce"), dict):
        c = data["coalesce"]
        return QueryOrigin(
            kind="coalesce",
            job=_text(c.get("jobName")),
            node_id=_text(c.get("nodeID")),
            node=_text(c.get("nodeName")),
            location=_text(c.get("storageLocation")),
            run_id=_text(c.get("runID")),
            stage=_text(c.get("stageName")),
        )
    if isinstance(data, dict) and data.get("app") == QUERY_TAG_APP:
        return QueryOrigin(
            kind="dw-dagster",
            job=_text(data.get("job")),
            run_id=_text(data.get("dagster_run_id")),
            stage=_text(data.get("purpose")),
            check=_text(data.get("check")),
            asset=_text(data.get("asset")),
        )
    return QueryOrigin(kind="other", raw=text or None)


def _text(value: object) -> str | None:
    return None if value is None or value == "" else str(value)
