"""docs/snowflake-contract.md stays true: every statement it lists is Snowflake SQL that the local Snowflake's
DuckDB-only check passes, every test it names exists, and every test of the local Snowflake's rules is named
there (no server: the statements run in the tests it names)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlglot

from dw_local.snowflake_rules import duckdb_only

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "snowflake-contract.md").read_text()
# The code spans of each statement row's second cell (a row may list a transaction's statements).
STATEMENTS = [
    statement
    for line in DOC.splitlines()
    if re.match(r"^\| (\d+|S\d+) \|", line)
    for statement in re.findall(r"`([^`]+)`", line.split(" | ")[1])
]
DEFINED = {
    name: path
    for path in (ROOT / "tests").rglob("test_*.py")
    for name in re.findall(r"^def (test_\w+)\(", path.read_text(), re.MULTILINE)
}


def test_the_page_lists_the_replays_statements_and_the_others():
    assert len(STATEMENTS) >= 60
    kinds = ("SELECT", "INSERT", "MERGE", "UPDATE", "DELETE", "CREATE", "BEGIN", "COMMIT", "ROLLBACK")
    assert all(s.startswith(kinds) for s in STATEMENTS), [s for s in STATEMENTS if not s.startswith(kinds)]


@pytest.mark.parametrize("statement", [s for s in STATEMENTS if "…" not in s and "<" not in s])
def test_each_whole_statement_is_snowflake_sql(statement):
    sqlglot.parse_one(statement.replace('"DB"', '"DW_PROD"'), read="snowflake")


@pytest.mark.parametrize("statement", STATEMENTS)
def test_no_statement_uses_duckdb_only_sql(statement):
    assert duckdb_only(statement) is None


def test_every_test_the_page_names_exists():
    paths = set(re.findall(r"`(tests/[\w/]+\.py)", DOC))
    assert paths and all((ROOT / p).exists() for p in paths), sorted(
        p for p in paths if not (ROOT / p).exists()
    )
    named = set(re.findall(r"\b(test_\w+)\b", DOC)) - {Path(p).stem for p in paths}
    assert named and not named - set(DEFINED), sorted(named - set(DEFINED))


def test_every_rule_of_the_local_snowflake_is_on_the_page():
    rules = (Path(__file__).parent / "test_local_snowflake_rules.py").read_text()
    tests = re.findall(r"^def (test_\w+)\(", rules, re.MULTILINE)
    assert tests and not [t for t in tests if t not in DOC]
    assert "tests/local_world/test_local_snowflake_auth.py" in DOC
