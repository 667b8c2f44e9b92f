"""``python -m dw_dagster``: the ``dw-dagster`` command."""

from dw_dagster.cli import run

run()
