"""Connections are reused within a run and a sensor tick, every statement keeps its own query tag, and the
login and network timeouts hold end to end against a hung Snowflake."""

from __future__ import annotations

import time

import dagster as dg
import pytest

from dw_dagster.warehouse.connections import WarehouseUnavailable
from dw_dagster.warehouse.migrations import migrate
from dw_dagster.warehouse.ops import OpsSchema
from dw_dagster.warehouse.resources import WarehouseResource, warehouse_from_env

OPS = OpsSchema("DW_WH_TEST", "OPS_REUSE")


def _work(snowflake: WarehouseResource, step: str) -> None:
    """What a check step does: reads a table, then writes its history, several times over."""
    for i in range(3):
        with snowflake.tagged_connection("check.read", check=step, asset=f"a/{i}") as conn:
            conn.cursor().execute("SELECT 1")
        with OPS.connect(snowflake, "check.history", check=step, asset=f"a/{i}") as conn:
            conn.cursor().execute(f"SELECT COUNT(*) FROM {OPS.table('METRIC_HISTORY')}")


@dg.op
def first_step(snowflake: WarehouseResource) -> None:
    _work(snowflake, "first")


@dg.op(ins={"after": dg.In(dg.Nothing)})
def second_step(snowflake: WarehouseResource) -> None:
    _work(snowflake, "second")


@dg.job(executor_def=dg.in_process_executor)
def two_steps():
    second_step(after=first_step())


def test_a_run_shares_one_connection_per_schema_and_each_statement_keeps_its_tag(warehouse, sent, closed):
    migrate(warehouse, OPS)
    sent.clear()
    closed.clear()
    result = two_steps.execute_in_process(resources={"snowflake": warehouse})
    assert result.success
    # 12 statements from 2 steps, on 2 sessions (the table reads, and the ops schema), not 12 logins.
    assert len(sent) == 12
    assert len({s.session for s in sent}) == 2
    history = [s for s in sent if "METRIC_HISTORY" in s.sql]
    assert {s.session for s in history} != {s.session for s in sent if s.sql == "SELECT 1"}
    # Each statement names its own purpose, check and asset, though it shares the session.
    assert [(s.tag["purpose"], s.tag["check"], s.tag["asset"]) for s in sent[:4]] == [
        ("check.read", "first", "a/0"),
        ("check.history", "first", "a/0"),
        ("check.read", "first", "a/1"),
        ("check.history", "first", "a/1"),
    ]
    assert all(s.tag["app"] == "dw-dagster" for s in sent)
    # The next run logs in afresh: the first run's sessions ended with it.
    assert {id(c) for c in closed} == {s.session for s in sent}
    sent.clear()
    assert two_steps.execute_in_process(resources={"snowflake": warehouse}).success
    assert len({s.session for s in sent}) == 2


def test_a_sensor_tick_shares_one_connection_and_closes_it(warehouse, sent, closed):
    migrate(warehouse, OPS)
    opened = []

    @dg.sensor(job=two_steps)
    def polling(context, snowflake: WarehouseResource):
        for purpose in ("sensor.a", "sensor.b", "sensor.c"):
            with OPS.connect(snowflake, purpose) as conn:
                conn.cursor().execute(f"SELECT COUNT(*) FROM {OPS.table('INCIDENTS')}")
                opened.append(conn.raw)
        return dg.SkipReason("nothing new")

    sent.clear()
    closed.clear()
    with dg.build_sensor_context(resources={"snowflake": warehouse}) as context:
        polling(context)
    assert len(sent) == 3 and len({s.session for s in sent}) == 1
    assert [s.tag["purpose"] for s in sent] == ["sensor.a", "sensor.b", "sensor.c"]
    assert closed == [opened[0]] and all(conn is opened[0] for conn in opened)


def test_outside_dagster_each_connection_is_its_own_and_closed(warehouse, sent, closed):
    raws = []
    for purpose in ("cli.a", "cli.b"):
        with warehouse.tagged_connection(purpose, job="cli") as conn:
            conn.cursor().execute("SELECT 1")
            raws.append(conn.raw)
    assert len({s.session for s in sent}) == 2
    assert closed == raws


def test_a_login_does_not_send_the_processs_imported_packages_to_snowflake(warehouse):
    """The connector would list every package this process imported in its telemetry at each login."""
    with warehouse.tagged_connection("cli.a", job="cli") as conn:
        assert conn.raw._log_imported_packages_in_telemetry is False
        telemetry = [str(entry.to_dict()) for entry in conn.raw._telemetry._log_batch]
    assert not any("imported_packages" in entry for entry in telemetry)


def test_secrets_stay_environment_variables_and_never_reach_a_tag(env, warehouse, sent):
    assert warehouse.password == "SNOWFLAKE_PASSWORD"  # the variable's name, nothing to show in the UI
    with warehouse.tagged_connection("check.volume", check="volume", dagster_run_id="r-1") as conn:
        conn.cursor().execute("SELECT 1")
    assert sent[-1].tag == {
        "app": "dw-dagster",
        "purpose": "check.volume",
        "check": "volume",
        "dagster_run_id": "r-1",
    }
    assert env["SNOWFLAKE_PASSWORD"] not in str(sent[-1].tag)


@pytest.mark.parametrize("value", ["ten", "0", "-5"])
def test_a_bad_timeout_is_refused_naming_the_variable(env, value):
    from dw_dagster.config import DwConfigError

    with pytest.raises(
        DwConfigError,
        match=f"SNOWFLAKE_LOGIN_TIMEOUT: expected a whole number of seconds, at least 1, got {value!r}",
    ):
        warehouse_from_env({**env, "SNOWFLAKE_LOGIN_TIMEOUT": value})


@dg.op
def checks_on_a_hung_warehouse(context, snowflake: WarehouseResource) -> list[str]:
    """Like a check step: each check catches its own failure and is reported as errored."""
    errors = []
    for i in range(4):
        try:
            with snowflake.tagged_connection("check.count", check=f"c{i}") as conn:
                conn.cursor().execute("SELECT 1")
        except WarehouseUnavailable as e:
            errors.append(str(e))
    return errors


def test_a_hung_snowflake_at_login_ends_the_run_within_the_login_timeout(env, hung):
    # Before: the connector's 60 s socket timeout bounded each login request whatever the login timeout
    # said, and each of the 4 checks logged in again: 4 minutes. Now: one login timeout, then none.
    warehouse = warehouse_from_env({**env, "SNOWFLAKE_LOGIN_TIMEOUT": "3"})

    @dg.job(executor_def=dg.in_process_executor)
    def hung_checks():
        checks_on_a_hung_warehouse()

    with hung():
        started = time.monotonic()
        result = hung_checks.execute_in_process(resources={"snowflake": warehouse})
        elapsed = time.monotonic() - started
    errors = result.output_for_node("checks_on_a_hung_warehouse")
    assert len(errors) == 4
    assert "at login within the login timeout of 3 s (SNOWFLAKE_LOGIN_TIMEOUT)" in errors[0]
    assert all("earlier in this run; not tried again" in e for e in errors[1:])
    assert elapsed < 20, f"{elapsed:.1f} s for a 3 s login timeout"


def test_a_snowflake_hung_mid_run_fails_the_statement_within_the_network_timeout(env, hung):
    warehouse = warehouse_from_env({**env, "SNOWFLAKE_NETWORK_TIMEOUT": "3"})
    outcome = {}

    @dg.op
    def query_then_hang(snowflake: WarehouseResource) -> None:
        with snowflake.tagged_connection("job.a") as conn:
            conn.cursor().execute("SELECT 1")
        with hung():
            started = time.monotonic()
            for purpose in ("job.b", "job.c"):
                try:
                    with snowflake.tagged_connection(purpose) as conn:
                        conn.cursor().execute("SELECT 2")
                except WarehouseUnavailable as e:
                    outcome[purpose] = (str(e), time.monotonic() - started)

    @dg.job(executor_def=dg.in_process_executor)
    def hangs():
        query_then_hang()

    assert hangs.execute_in_process(resources={"snowflake": warehouse}).success
    message, after = outcome["job.b"]
    assert "did not answer a statement" in message and after < 15, f"{after:.1f} s for a 3 s network timeout"
    message, later = outcome["job.c"]
    assert "not tried again" in message and later - after < 1
