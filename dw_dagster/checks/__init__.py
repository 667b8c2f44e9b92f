"""Asset checks over what the Coalesce jobs build: volume, freshness and recorded totals."""

from __future__ import annotations

from dw_dagster.checks.metrics import MetricsFile, load_metrics_file

__all__ = ["MetricsFile", "load_metrics_file"]
