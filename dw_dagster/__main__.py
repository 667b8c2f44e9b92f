"""``python -m dw_dagster``: the ``dw-dagster`` command."""

from dw_dagster.app.cli import run

run()
