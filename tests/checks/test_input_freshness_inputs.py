"""A table with a freshness rule for each of its inputs is one check over all of them: a stale input fails it
whichever rule names it, and the finding names that input. Two check specs of one name on one asset left only
the file's last rule judged. Two shapes: a fact fed by a union of two feeds, and a fact priced through a rate
feed beside its own source. The local warehouse (fakesnow) holds the loads; the check judges them against
now (an ephemeral instance holds no build of the table)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import dagster as dg
import fakesnow
import pytest
import snowflake.connector

from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.freshness import INPUT_FRESHNESS_CHECK, InputFreshnessChecks, input_freshness_specs
from dw_dagster.checks.history import input_load_series
from dw_dagster.checks.measure import Binds, measure
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.checks.run_context import CheckRun
from dw_dagster.checks.tonight import Night

# name: (the fact, its two inputs in the file's order)
SHAPES = {
    "union_of_two_feeds": ("CORE.FCT_USAGE", ("RAW.USAGE_NORTH", "RAW.USAGE_SOUTH")),
    "source_and_rate_feed": ("MART.FCT_ORDERS_EUR", ("RAW.ORDERS", "RAW.FX_RATES")),
}


def _spec(table: str) -> dg.AssetSpec:
    schema, name = table.split(".")
    return dg.AssetSpec(
        key=[schema.lower(), name.lower()],
        metadata={
            "dagster/table_name": f"DB.{table}",
            "dagster/column_schema": dg.TableSchema(
                columns=[dg.TableColumn(name="LOADED_AT", type="TIMESTAMP_TZ")]
            ),
        },
    )


def _path(table: str) -> str:
    return table.lower().replace(".", "/")


class _Context:
    """What the check reads of its Dagster context: the instance holding the table's builds (none here)."""

    def __init__(self, instance: dg.DagsterInstance) -> None:
        self.instance = instance


def _evaluated(shape: str, hours_old: tuple[float, float], missing: int | None = None):
    """The table's check over its two inputs, loaded ``hours_old`` ago; ``missing``: that input's table is
    not there (its part of the statement fails)."""
    fact, inputs = SHAPES[shape]
    specs = [_spec(t) for t in (fact, *inputs)]
    rules = [
        {"asset": _path(fact), "column": "LOADED_AT", "input": _path(i), "input_column": "LOADED_AT"}
        for i in inputs
    ]
    metrics = MetricsFile.model_validate({"freshness": {"inputs": rules}})
    now = datetime.now(UTC)
    with fakesnow.patch():
        conn = snowflake.connector.connect(database="DB", paramstyle="qmark")
        cur = conn.cursor()
        for table, age in ((fact, min(hours_old)), *zip(inputs, hours_old, strict=True)):
            if missing is not None and table == inputs[missing]:
                continue
            schema, _ = table.split(".")
            cur.execute(f'CREATE SCHEMA IF NOT EXISTS "DB"."{schema}"')
            quoted = ".".join(f'"{p}"' for p in ("DB", *table.split(".")))
            cur.execute(f'CREATE TABLE {quoted} ("LOADED_AT" TIMESTAMP_TZ)')
            cur.execute(f"INSERT INTO {quoted} VALUES (?)", [now - timedelta(hours=age)])
        checks = InputFreshnessChecks(metrics, specs, [specs[0].key])
        measured = measure(cur, checks.parts(), Binds())
        conn.close()
    found = []
    with dg.DagsterInstance.ephemeral() as instance:
        night = Night(
            context=_Context(instance), run=CheckRun(date.today(), "test-run", None, None), warehouse=None,
            ops=None, history=None, cause_scopes={}, calendar=BusinessCalendar.model_validate({"holidays": []}),
            levels={}, incident_days=set(), past={}, reporter=found.append,
        )  # type: ignore[arg-type]  # fmt: skip
        results, errors = checks.evaluate(night, measured)
    return specs, metrics, results, errors, found, night


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("stale", [0, 1])
def test_a_stale_input_fails_the_tables_one_check_whichever_rule_names_it(shape: str, stale: int) -> None:
    fact, inputs = SHAPES[shape]
    # Older than any allowance (26 h, and a weekend a business-day calendar adds when today is a Monday).
    ages = (120.0, 1.0) if stale == 0 else (1.0, 120.0)
    specs, metrics, results, errors, found, _ = _evaluated(shape, ages)
    checks = input_freshness_specs(metrics, specs)
    assert [(c.name, c.asset_key) for c in checks] == [(INPUT_FRESHNESS_CHECK, specs[0].key)]
    assert {d.asset_key for d in checks[0].additional_deps} == {s.key for s in specs[1:]}
    assert not errors
    (result,) = results
    assert not result.passed
    assert _path(inputs[stale]) in (result.description or "")
    assert _path(inputs[1 - stale]) not in (result.description or "")
    assert result.metadata["input"] == dg.MetadataValue.text(_path(inputs[stale]))
    (finding,) = found
    assert finding.asset_key == _path(fact) and finding.evidence["input"] == _path(inputs[stale])


@pytest.mark.parametrize("shape", SHAPES)
def test_a_table_whose_inputs_are_all_fresh_passes(shape: str) -> None:
    _, _, results, errors, found, _ = _evaluated(shape, (2.0, 3.0))
    (result,) = results
    assert result.passed and not errors and not found


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("missing", [0, 1])
def test_an_input_not_measured_leaves_the_check_errored_and_the_other_inputs_load_recorded(
    shape: str, missing: int
) -> None:
    """Not a pass (one input is unjudged), and the other input's load is still recorded tonight: its cadence
    (the nights its load advanced) keeps no hole."""
    fact, inputs = SHAPES[shape]
    _, _, results, errors, found, night = _evaluated(shape, (1.0, 2.0), missing=missing)
    assert not results and not found
    (error,) = errors
    assert _path(fact) in error and _path(inputs[missing]) in error
    assert input_load_series(_path(inputs[1 - missing])) in night.readings
    assert input_load_series(_path(inputs[missing])) not in night.readings
