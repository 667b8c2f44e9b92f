"""What the operator commands reach: the instance, the warehouse's ops schema, the context file, Slack.

Every command module builds one :class:`Operations`; it reads the environment the code location reads.
Reading the ops schema imports neither Dagster nor a Dagster resource (the connection comes from the same
settings, ``warehouse/settings.py``): a command that only reads answers in about the time of the connector's
import; the Dagster instance and Slack are made when a command first uses them.
"""

from __future__ import annotations

import functools

import click


class Operations:
    """What the operator commands reach: the instance, the warehouse's ops schema, the context, Slack."""

    def __init__(self) -> None:
        from dw_dagster.app.settings import Settings
        from dw_dagster.checks import load_metrics_file
        from dw_dagster.checks.metrics import MetricsFile
        from dw_dagster.context.models import load_context_file
        from dw_dagster.incidents.store import IncidentStore
        from dw_dagster.warehouse.ops import OpsSchema
        from dw_dagster.warehouse.settings import direct_warehouse

        settings = Settings.from_env()
        if not settings.database or not settings.context_file:
            raise click.ClickException(
                "SNOWFLAKE_DATABASE and DW_CONTEXT_FILE must be set: incidents and approvals live in the "
                "warehouse's ops schema, and their owners and approvers come from the context file"
            )
        metrics = load_metrics_file(settings.metrics_file) if settings.metrics_file else MetricsFile()
        self.context = load_context_file(settings.context_file)
        self.warehouse = direct_warehouse()
        self.ops = OpsSchema(settings.database, metrics.ops_schema)
        self.store = IncidentStore(self.warehouse, self.ops)

    @functools.cached_property
    def slack(self):
        """Slack, for the commands that post (made when first used: reading commands do not load its SDK)."""
        from dw_dagster.notifications.resources import slack_from_env

        return slack_from_env()

    @functools.cached_property
    def instance(self):
        """The Dagster instance (DAGSTER_HOME), for the commands that act through it."""
        import dagster as dg

        return dg.DagsterInstance.get()

    def person(self, who: str):
        """A member of a team in the context file, or a clear error: every action names who takes it."""
        person = self.context.person(who)
        if person is None:
            raise click.ClickException(f"{who!r} is not a member of any team in the context file")
        return person

    def book(self):
        from dw_dagster.remediation.approvals import ApprovalBook

        return ApprovalBook(self.store, self.context)

    def control(self):
        from dw_dagster.remediation.control import OrgControl

        return OrgControl(self.warehouse, self.ops, self.context)

    def tell_owners(
        self, incident_id: str, text: str, kind: str, version: str, run_id: str | None = None
    ) -> None:
        """A reply in the incident's owner threads (through the outbox: an outage delays it, never loses it);
        ``run_id`` is the run it is about (linked)."""
        from dw_dagster.remediation.control import gated_notifier

        incident = self.store.get(incident_id)
        if incident is not None:
            gated_notifier(self.slack, self.store, self.context).post_update(
                incident, text, kind=kind, version=version, run_id=run_id
            )
