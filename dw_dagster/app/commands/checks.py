"""Operator commands of the checks: ``dw-dagster baseline accept``.

An owner who knows tonight's new level is right (a new plant, a price change, a migration) accepts it:
the series of the asset's checks are re-based from their latest recorded night (``BASELINE_LEVELS``, kind
``accepted``, with who and why), that night is no longer left out of the baseline, and the following nights
are judged at the new level. Only an owner of the asset (the context file's Coalesce owners, or the owner
of a recorded total on it) may accept.
"""

from __future__ import annotations

import click

VOLUME_CHECK = "volume"


@click.group("baseline")
def baseline() -> None:
    """The baselines the checks judge by."""


@baseline.command("accept")
@click.argument("asset")
@click.option(
    "--check", "check", default=None, help="Only this check of the asset (e.g. volume, total_<name>)."
)
@click.option("--as", "who", required=True, help="Your name or email, as in the context file's teams.")
@click.option("--reason", required=True, help="Why the new level is right; recorded and shown on the check.")
def accept(asset: str, check: str | None, who: str, reason: str) -> None:
    """Accept the latest recorded level of ASSET's checks as its new baseline level."""
    from datetime import date

    from dw_dagster.app.commands.lookup import no_such
    from dw_dagster.app.operations import Operations
    from dw_dagster.app.settings import Settings
    from dw_dagster.checks.history import HistoryStore, Rebase, total_series, volume_series
    from dw_dagster.checks.metrics import MetricsFile, load_metrics_file

    ops = Operations()
    settings = Settings.from_env()
    metrics = load_metrics_file(settings.metrics_file) if settings.metrics_file else MetricsFile()
    person = ops.person(who)
    totals = [t for t in metrics.totals if t.asset == asset]
    store = HistoryStore(ops.warehouse, ops.ops, check="baseline_accept")
    if not totals:
        with store.session("cli.baseline.accept") as history:
            recorded = recorded_assets(history, ops.ops)
        if asset not in recorded:
            known = sorted(recorded | {t.asset for t in metrics.totals})
            raise no_such("asset with recorded checks", asset, known)
    owners = set(ops.context.owners_for(asset)) | {t.owner for t in totals}
    teams = set(ops.context.teams_of(person))
    if not teams & owners:
        raise click.ClickException(
            f"{person.name} is not an owner of {asset} (owners: {', '.join(sorted(owners)) or 'none'})"
        )
    accepted: list[tuple[str, date]] = []
    with store.session("cli.baseline.accept") as history:
        volume_night = history.latest_volume(asset)
        available = {VOLUME_CHECK: volume_night is not None, **{f"total_{t.name}": True for t in totals}}
        if check is not None and not available.get(check):
            raise click.ClickException(
                f"{asset} has no recorded check {check!r} "
                f"(its checks: {', '.join(sorted(c for c, ok in available.items() if ok)) or 'none'})"
            )
        if check in (None, VOLUME_CHECK) and volume_night is not None:
            history.record_rebase(
                Rebase(
                    series=volume_series(asset),
                    from_date=volume_night,
                    kind="accepted",
                    reason=reason,
                    accepted_by=person.name,
                )
            )
            history.flag_volume(asset, volume_night, flagged=False)
            accepted.append((VOLUME_CHECK, volume_night))
        for t in totals:
            if check not in (None, f"total_{t.name}"):
                continue
            last = history.latest_metric(t.name)
            if last is None:
                raise click.ClickException(f"total {t.name}: nothing recorded yet, so no level to accept")
            night = last.business_date
            for series in [total_series(t.name), *(total_series(t.name, g) for g in last.groups)]:
                history.record_rebase(
                    Rebase(
                        series=series,
                        from_date=night,
                        kind="accepted",
                        reason=reason,
                        accepted_by=person.name,
                    )
                )
            history.flag_metric(t.name, night, flagged=False)
            accepted.append((f"total_{t.name}", night))
    if not accepted:
        raise click.ClickException(
            f"{asset}: no recorded level to accept (no volume or total recorded for it)"
        )
    _note_on_open_incidents(ops, asset, person.name, reason, accepted)
    for name, night in accepted:
        click.echo(f"{asset} {name}: new level from {night.isoformat()} accepted by {person.name}: {reason}")


def recorded_assets(history, ops) -> set[str]:
    """The assets whose row counts the checks have recorded (their volume series)."""
    from dw_dagster.checks.history import volume_series

    prefix = volume_series("")
    history.cur.execute(
        f"SELECT DISTINCT METRIC FROM {ops.table('METRIC_HISTORY')} WHERE STARTSWITH(METRIC, ?)", (prefix,)
    )
    return {row[0][len(prefix) :] for row in history.cur.fetchall()}


def _note_on_open_incidents(ops, asset: str, by: str, reason: str, accepted) -> None:
    """The acceptance goes on the record of every open incident with a finding on the asset."""
    for incident in ops.store.list(status="open"):
        findings = ops.store.events(incident.incident_id, kind="finding")
        if any(f.detail.get("asset_key") == asset for f in findings):
            for name, night in accepted:
                ops.store.append_event(
                    incident.incident_id,
                    "baseline_accepted",
                    f"baseline_accepted|{asset}|{name}|{night.isoformat()}",
                    {
                        "asset_key": asset,
                        "check_name": name,
                        "from_date": night.isoformat(),
                        "by": by,
                        "reason": reason,
                    },
                )
