"""The ops schema is created and migrated by one versioned, idempotent command; steps send no DDL; a missing
or older schema is a clear error naming the command."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dw_dagster.app.cli import main
from dw_dagster.app.commands.ops import migrate_deployment
from dw_dagster.config import DwConfigError
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.warehouse.migrations import SCHEMA_VERSION, VERSION_TABLE, migrate, state
from dw_dagster.warehouse.ops import TABLES, OpsSchema, OpsSchemaError

DATABASE = "DW_WH_TEST"


def _dw_dagster(env: dict[str, str], *args: str):
    """The command in this process (the product's commands import nothing of the local world), signing in
    only as ``env`` says (a sign-in another file's world left in the process would be a second one)."""
    others = {k: None for k in ("SNOWFLAKE_PRIVATE_KEY_PATH", "SNOWFLAKE_PRIVATE_KEY", "SNOWFLAKE_TOKEN")}
    return CliRunner().invoke(main, list(args), env={**others, **env})


def test_a_missing_schema_is_an_error_naming_the_command(warehouse):
    store = IncidentStore(warehouse, OpsSchema(DATABASE, "OPS_NEVER"))
    with pytest.raises(
        OpsSchemaError, match=r"DW_WH_TEST.OPS_NEVER does not exist: run `dw-dagster ops migrate`"
    ):
        store.list()


def test_migrate_creates_every_table_once_and_a_second_run_changes_nothing(warehouse, sent):
    ops = OpsSchema(DATABASE, "OPS_FRESH")
    first = migrate(warehouse, ops)
    assert first.before.version is None and first.version == SCHEMA_VERSION
    created = [s for s in first.changes if s.startswith("CREATE TABLE")]
    assert len(created) == len(TABLES) + 1  # and the version table
    assert state(warehouse, ops).current
    sent.clear()
    again = migrate(warehouse, ops)
    assert again.changes == [] and "up to date" in again.summary()
    # Two reads (the columns, the recorded version), nothing written.
    assert len(sent) == 2 and not any(
        s.sql.lstrip().upper().startswith(("CREATE", "ALTER", "INSERT")) for s in sent
    )
    with ops.connect(warehouse, "test") as conn:
        cur = conn.cursor()
        cur.execute(f"SELECT VERSION, MIGRATED_BY, CHANGES FROM {ops.table(VERSION_TABLE)}")
        rows = cur.fetchall()
    assert len(rows) == 1 and rows[0][0] == SCHEMA_VERSION and rows[0][1].startswith("dw-dagster")
    assert len(json.loads(rows[0][2])) == len(first.changes)


def test_an_older_schema_is_named_and_migrate_brings_it_up_keeping_its_rows(warehouse):
    ops = OpsSchema(DATABASE, "OPS_OLD")
    migrate(warehouse, ops)
    store = IncidentStore(warehouse, ops)
    with ops.connect(warehouse, "test") as conn:
        cur = conn.cursor()
        cur.execute(
            f"INSERT INTO {ops.table('CONTROL_EVENTS')} (EVENT_AT, ACTION, ACTOR, REASON)"
            " VALUES (CURRENT_TIMESTAMP(), 'stop', 'someone', 'kept')"
        )
        # As an older dw-dagster left it: a table and a column this one needs are not there.
        cur.execute(f"ALTER TABLE {ops.table('CONTROL_EVENTS')} DROP COLUMN REASON")
        cur.execute(f"DROP TABLE {ops.table('INCIDENTS')}")
    with pytest.raises(OpsSchemaError) as err:
        store.list()
    assert (
        "DW_WH_TEST.OPS_OLD is older than this dw-dagster (missing INCIDENTS, CONTROL_EVENTS.REASON)"
        in str(err.value)
    )
    assert "run `dw-dagster ops migrate`" in str(err.value)
    report = migrate(warehouse, ops)
    assert any("ADD COLUMN IF NOT EXISTS REASON" in s for s in report.changes)
    assert store.list() == []
    with ops.connect(warehouse, "test") as conn:
        cur = conn.cursor()
        cur.execute(f"SELECT ACTOR, REASON FROM {ops.table('CONTROL_EVENTS')}")
        assert cur.fetchall() == [("someone", None)]


def test_an_unrelated_sql_error_is_not_blamed_on_the_schema(warehouse):
    from snowflake.connector.errors import ProgrammingError

    ops = OpsSchema(DATABASE, "OPS_FRESH")
    migrate(warehouse, ops)
    with pytest.raises(ProgrammingError), ops.connect(warehouse, "test") as conn:
        conn.cursor().execute(f"SELECT NO_SUCH_COLUMN FROM {ops.table('INCIDENTS')}")


def test_the_command_migrates_the_deployments_schema_and_status_says_when_it_is_needed(env):
    env = {**env, "DW_METRICS_FILE": ""}
    status = _dw_dagster(env, "ops", "status")
    assert status.exit_code == 1, status.output
    assert (
        "DW_WH_TEST.DW_OPS: never migrated" in status.output
        and "run `dw-dagster ops migrate`" in status.output
    )
    out = _dw_dagster(env, "ops", "migrate")
    assert out.exit_code == 0, out.output
    assert out.output.startswith(f"ops schema DW_WH_TEST.DW_OPS: new -> version {SCHEMA_VERSION}")
    again = _dw_dagster(env, "ops", "migrate")
    assert again.output.strip() == f"ops schema DW_WH_TEST.DW_OPS is up to date (version {SCHEMA_VERSION})"
    assert _dw_dagster(env, "ops", "status").exit_code == 0
    assert env["SNOWFLAKE_PASSWORD"] not in out.output


def test_migrate_deployment_takes_another_processs_environment(world, env, monkeypatch):
    # What `world up` calls with the world's environment, before this process has it.
    for name in ("SNOWFLAKE_PASSWORD", "SNOWFLAKE_USER", "SNOWFLAKE_ACCOUNT"):
        monkeypatch.delenv(name)
    report = migrate_deployment({**env, "DW_METRICS_FILE": ""})
    assert report.schema == "DW_WH_TEST.DW_OPS" and report.version == SCHEMA_VERSION


def test_without_a_database_the_command_says_which_variable(env):
    out = _dw_dagster({**env, "SNOWFLAKE_DATABASE": ""}, "ops", "migrate")
    # `dw-dagster` prints a DwConfigError as "error: ..." and exits 2 (cli.run).
    assert isinstance(out.exception, DwConfigError) and "SNOWFLAKE_DATABASE: not set" in str(out.exception)
