"""The tools' answers on a second world, the e-commerce world's files alone (no servers, no seeding): its
project file as the Coalesce API describes it, its context file's systems and its metrics file's checks;
and the server's start, which opens nothing until a tool needs it."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver.exceptions import ToolError

from dw_dagster.app.mcp.history_tools import history_answer, resolve_check
from dw_dagster.app.mcp.lineage_tools import trace
from dw_dagster.app.mcp.server import build_server, parse_http
from dw_dagster.checks.history import Rebase, Recorded, total_series
from dw_dagster.checks.metrics import load_metrics_file
from dw_dagster.coalesce.specs import load_coalesce_asset_specs
from dw_dagster.coalesce.state import CoalesceEnvironmentData, CoalesceWorkspaceData
from dw_dagster.coalesce.workspace_models import CoalesceEnvironment, CoalesceNode
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.context.models import load_context_file
from dw_dagster.context.specs import attach_context, build_context_asset_specs
from dw_local.coalesce_sim.api_shapes import environment_to_api, node_detail
from dw_local.coalesce_sim.project import load_project

WORLD = Path(__file__).resolve().parents[2] / "local" / "dw_local" / "scenarios" / "worlds" / "ecommerce"


@pytest.fixture(scope="module")
def graph() -> LineageGraph:
    project = load_project(WORLD / "project.yaml")
    (env,) = project.file.environments
    data = CoalesceWorkspaceData(
        base_url="http://coalesce.invalid", fetched_at=datetime(2026, 1, 1, tzinfo=UTC),
        environments=[CoalesceEnvironmentData(
            environment=CoalesceEnvironment.model_validate(environment_to_api(env, project.file.project, "ok", full=False)),
            nodes=[CoalesceNode.model_validate(node_detail(n, env)) for n in project.file.nodes], jobs=[],
        )],
    )  # fmt: skip
    context = load_context_file(WORLD / "context.yaml")
    specs = attach_context(load_coalesce_asset_specs(data), context) + build_context_asset_specs(context)
    return LineageGraph(specs)


def test_a_column_downstream_reaches_the_dashboards_and_who_reads_them(graph):
    out = trace(graph, "ref_marketing/store_map", column="CHANNEL")
    cols = [(c.asset_key, c.column) for c in out.columns]
    assert cols[0] == ("ref_marketing/store_map", "CHANNEL")
    assert ("mart/mart_channel_revenue", "CHANNEL") in cols
    looker = next(a for a in out.assets if a.asset_key == "looker/daily_revenue")
    assert looker.reads[0]["what"] == "08:30 finance stand-up" and looker.owners == ["team:finance"]
    assert "looker/category_performance" not in {a.asset_key for a in out.assets}, "not on CHANNEL's path"
    assert "08:30 finance stand-up" in out.text and "mart/mart_channel_revenue" in out.text


def test_upstream_names_the_sources_by_table_or_node_name(graph):
    by_name = trace(graph, "fct_sales", direction="upstream")
    assert by_name.asset_key == "sales/fct_sales"
    keys = {a.asset_key: a for a in by_name.assets}
    assert {"fivetran/shopify", "shopify/order_lines", "marketing_ops/store_map_sheet"} <= set(keys)
    assert keys["sales/fct_sales"].distance == 0 and keys["raw_shop/order_lines"].table
    by_table = trace(graph, keys["raw_shop/order_lines"].table, direction="upstream", depth=1)
    assert [a.asset_key for a in by_table.assets] == ["raw_shop/order_lines", "fivetran/shopify"]


def test_unknown_assets_and_columns_are_told_with_what_exists(graph):
    with pytest.raises(ToolError, match="did you mean sales/fct_sales"):
        trace(graph, "sales/fct_sale")
    with pytest.raises(ToolError, match="has no column 'NOPE'.*UNIT_PRICE"):
        trace(graph, "raw_shop/order_lines", column="NOPE")


def test_check_names_come_from_the_metrics_file():
    metrics = load_metrics_file(WORLD / "metrics.yaml")
    assert resolve_check(metrics, "total_channel_revenue", None) == (
        "total_channel_revenue",
        "mart/mart_channel_revenue",
        "channel_revenue",
    )
    assert resolve_check(metrics, "volume", "sales/fct_sales") == ("volume", "sales/fct_sales", None)
    with pytest.raises(ToolError, match="checks: volume, total_daily_revenue"):
        resolve_check(metrics, "total_channel_revenue", "sales/fct_sales")
    with pytest.raises(ToolError, match="per asset"):
        resolve_check(metrics, "volume", None)


def test_a_history_reads_night_by_night_with_incident_nights_and_new_levels():
    d1, d2 = date(2026, 3, 1), date(2026, 3, 2)
    recorded = {
        d2: Recorded(business_date=d2, value=1200.0, groups={"web": 800.0, "app": None}, flagged=True),
        d1: Recorded(business_date=d1, value=1500.0, groups={"web": 900.0, "app": 600.0}),
    }
    rebase = Rebase(series=total_series("channel_revenue"), from_date=d2, kind="accepted", reason="app moved",
                    accepted_by="Ana Souza")  # fmt: skip
    out = history_answer("total_channel_revenue", "mart/mart_channel_revenue", rebase.series, recorded,
                         [rebase], {d2})  # fmt: skip
    assert [n.business_date for n in out.nights] == [d1, d2]
    assert out.nights[1].left_out and out.nights[1].incident_night and not out.nights[0].incident_night
    assert "| 2026-03-02 | 1,200 | NULL | 800 | incident night, left out of the baseline |" in out.text
    assert "accepted by Ana Souza" in out.text


def test_the_server_starts_with_nothing_configured_and_a_tool_says_what_is_missing(monkeypatch):
    for name in ("SNOWFLAKE_DATABASE", "DW_CONTEXT_FILE", "DW_METRICS_FILE"):
        monkeypatch.delenv(name, raising=False)

    async def call():
        async with Client(build_server()) as client:
            listed = await client.list_tools()
            return listed, await client.call_tool("list_incidents", {"status": "all"})

    listed, result = anyio.run(call)
    assert len(listed.tools) == 10
    assert result.is_error and "SNOWFLAKE_DATABASE and DW_CONTEXT_FILE must be set" in result.content[0].text


def test_http_address():
    assert parse_http("0.0.0.0:8765") == ("0.0.0.0", 8765) and parse_http(":9000") == ("127.0.0.1", 9000)
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        parse_http("localhost")


def test_an_unreachable_warehouse_is_a_tool_error_without_the_password(monkeypatch):
    import socket

    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    password = "s3cret-Passw0rd-not-shown"
    env = {"SNOWFLAKE_ACCOUNT": "acct", "SNOWFLAKE_USER": "DW", "SNOWFLAKE_PASSWORD": password,
           "SNOWFLAKE_DATABASE": "DW_SHOP", "SNOWFLAKE_HOST": "127.0.0.1", "SNOWFLAKE_PORT": str(port),
           "SNOWFLAKE_PROTOCOL": "http", "SNOWFLAKE_LOGIN_TIMEOUT": "2", "DW_RETRY_BACKOFF_SECONDS": "0",
           "DW_CONTEXT_FILE": str(WORLD / "context.yaml"), "DW_METRICS_FILE": str(WORLD / "metrics.yaml")}  # fmt: skip
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name in ("SNOWFLAKE_PRIVATE_KEY_PATH", "SNOWFLAKE_PRIVATE_KEY", "SNOWFLAKE_TOKEN"):
        monkeypatch.delenv(name, raising=False)  # a password sign-in only

    async def call():
        async with Client(build_server()) as client:
            return await client.call_tool("show_incident", {"incident_id": "INC-20260301-abcdef"})

    result = anyio.run(call)
    message = result.content[0].text
    assert result.is_error and "could not read the incident from the warehouse" in message, message
    assert password not in message and "Traceback" not in message


def test_no_tool_reaches_what_approves_deploys_or_releases():
    # The approval gate (approve, reject, release a held run) and a deploy belong to people: the server's
    # modules import none of it, lazily or not.
    import ast

    mcp_dir = Path(__file__).resolve().parents[2] / "dw_dagster" / "app" / "mcp"
    forbidden = {"dw_dagster.remediation.gate", "dw_dagster.remediation.identity", "dw_local"}
    for module in sorted(mcp_dir.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
            elif isinstance(node, ast.Import):
                names = {a.name for a in node.names}
            else:
                continue
            assert not {n for n in names for f in forbidden if n == f or n.startswith(f + ".")}, module.name
            assert not {n for n in names if n.rsplit(".", 1)[-1] in {"approve_run", "reject_run", "release"}}
