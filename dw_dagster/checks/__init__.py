"""Asset checks over what the Coalesce jobs build: volume, freshness and recorded totals."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import dagster as dg

from dw_dagster.checks.freshness import apply_freshness_policies
from dw_dagster.checks.metrics import MetricsFile, load_metrics_file
from dw_dagster.checks.nightly import build_nightly_checks
from dw_dagster.checks.recorded_totals import TableResolver

__all__ = ["MetricsFile", "build_check_definitions", "cause_scopes", "load_metrics_file"]


def cause_scopes(specs: Sequence[dg.AssetSpec]) -> dict[str, str]:
    """By default a night's findings share a cause when one Coalesce job built their assets."""
    out = {}
    for spec in specs:
        jobs = spec.metadata.get("coalesce/jobs")
        names = [j["name"] for j in jobs.data] if jobs is not None else []  # type: ignore[union-attr]
        if names:
            out[spec.key.to_user_string()] = f"job:{names[0]}"
    return out


def build_check_definitions(
    metrics: MetricsFile,
    specs: Sequence[dg.AssetSpec],
    resolve_table: TableResolver,
    database: str,
    executable: Collection[dg.AssetKey] = frozenset(),
) -> dg.Definitions:
    """The assets with their freshness policies, and every configured check on them (one step).
    ``executable``: the assets a Dagster run can materialize, which the checks then run after."""
    checks = build_nightly_checks(metrics, specs, resolve_table, cause_scopes(specs), database, executable)
    return dg.Definitions(assets=apply_freshness_policies(metrics, specs), asset_checks=checks)
