"""The Coalesce models against the shapes docs/coalesce-api.md records: no network."""

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from dw_dagster.coalesce.errors import (
    CoalesceAPIError,
    CoalesceResponseError,
    CoalesceRunTimeoutError,
    parse_response,
)
from dw_dagster.coalesce.models import (
    CoalesceCancelRunRequest,
    CoalescePage,
    CoalesceRerunDetails,
    CoalesceRerunRequest,
    CoalesceStartRunDetails,
    CoalesceStartRunRequest,
    CoalesceUserCredentials,
)
from dw_dagster.coalesce.run_models import (
    CoalesceRun,
    CoalesceRunResults,
    CoalesceRunStatus,
    CoalesceRunStatusResponse,
    CoalesceRunSummary,
    CoalesceRunType,
    CoalesceStartRunResponse,
)
from dw_dagster.coalesce.state import CoalesceEnvironmentData, CoalesceWorkspaceData
from dw_dagster.coalesce.workspace_models import (
    CoalesceEnvironment,
    CoalesceJob,
    CoalesceNode,
    CoalesceNodeSummary,
)

FCT_ID = "5d0b8c84-6f5e-5b4c-9d47-000000000001"
STG_ID = "5d0b8c84-6f5e-5b4c-9d47-000000000002"

FULL_NODE = {
    "id": FCT_ID,
    "name": "FCT_INVENTORY_POSITION",
    "description": "Network on-hand position by warehouse and item.",
    "nodeType": "Fact",
    "database": "DW_PROD",
    "schema": "INVENTORY",
    "locationName": "INVENTORY",
    "config": {"truncateBefore": True, "testsEnabled": True},
    "materializationType": "table",
    "isMultisource": False,
    "overrideSQL": False,
    "metadata": {
        "columns": [
            {
                "columnID": "c-1",
                "name": "INVENTORY_POSITION_KEY",
                "dataType": "VARCHAR",
                "description": "",
                "nullable": False,
                "transform": '"STG_ONHAND"."ORGANIZATION_ID" || \'-\' || "STG_ONHAND"."ITEM_ID"',
                "isBusinessKey": True,
                "isSurrogateKey": False,
                "primaryKey": False,
                "uniqueKey": False,
                "appliedColumnTests": {"unique": True, "notNull": True},
                "sources": [
                    {
                        "transform": "",
                        "columnReferences": [
                            {"nodeID": STG_ID, "columnID": "s-1"},
                            {"nodeID": STG_ID, "columnID": "s-2"},
                        ],
                    }
                ],
                "hashDetails": {"columns": []},
            }
        ],
        "sourceMapping": [
            {
                "name": "FCT_INVENTORY_POSITION",
                "aliases": {"STG_ONHAND": STG_ID},
                "customSQL": {"customSQL": ""},
                "dependencies": [{"locationName": "STAGE", "nodeName": "STG_ONHAND"}],
                "join": {"joinCondition": "FROM {{ ref('STAGE', 'STG_ONHAND') }} \"STG_ONHAND\""},
                "noLinkRefs": [],
            }
        ],
        "appliedNodeTests": [
            {
                "name": "NO_NEGATIVE_ONHAND",
                "description": "On-hand is never negative.",
                "continueOnFailure": False,
                "runOrder": "After",
                "templateString": "SELECT * FROM {{ ref('INVENTORY', 'FCT_INVENTORY_POSITION') }} WHERE 1=0",
                "testCategory": "custom",
            }
        ],
        "enabledColumnTestIDs": ["unique", "notNull"],
    },
}

RUN = {
    "id": 42,
    "version": 1,
    "runType": "refresh",
    "runStatus": "failed",
    "runStartTime": "2024-03-05T08:00:00Z",
    "runEndTime": "2024-03-05T08:21:30.123Z",
    "reRunID": None,
    "runHistory": [40, 41],
    "runTimeParameters": {"REGION": "SOUTH"},
    "userID": "u-7",
    "userCredentials": {
        "snowflakeAccount": "acme",
        "snowflakeAuthType": "Basic",
        "snowflakeUsername": "PLANNING_OPS",
        "snowflakeRole": "PLANNING_OPS",
        "snowflakeWarehouse": "TRANSFORM_WH",
    },
    "runDetails": {
        "environmentID": "2",
        "jobID": "1",
        "includeNodesSelector": "{FCT_INVENTORY_POSITION}+",
        "excludeNodesSelector": "",
        "parallelism": 16,
        "nodesInRun": 3,
        "canceled": False,
    },
}


def credentials(**overrides) -> CoalesceUserCredentials:
    return CoalesceUserCredentials.model_validate(
        {
            "snowflakeUsername": "PLANNING_OPS",
            "snowflakePassword": "hunter2-secret",
            "snowflakeWarehouse": "TRANSFORM_WH",
            "snowflakeRole": "PLANNING_OPS",
            **overrides,
        }
    )


def test_environment_reads_aware_times_and_keeps_unknown_fields() -> None:
    env = CoalesceEnvironment.model_validate(
        {
            "id": 2,
            "name": "PROD",
            "project": "1",
            "createdAt": "2024-01-02T03:04:05.678Z",
            "createdBy": {"id": "u-1", "firstName": "Ada", "lastName": "Lovelace"},
            "status": "Waiting",
            "connectionAccount": "acme",
        }
    )
    assert env.id == "2"
    assert env.created_at == datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    assert env.created_by and env.created_by.first_name == "Ada"
    assert env.model_extra == {"connectionAccount": "acme"}
    assert env.model_dump(mode="json")["connectionAccount"] == "acme"


def test_times_without_offset_are_utc_and_offsets_are_kept() -> None:
    run = CoalesceRunSummary.model_validate(
        {
            "id": 1,
            "runType": "deploy",
            "runStatus": "completed",
            "runStartTime": "2024-03-05T02:00:00",
            "runEndTime": "2024-03-05T02:19:00-06:00",
        }  # fmt: skip
    )
    assert run.run_start_time == datetime(2024, 3, 5, 2, tzinfo=UTC)
    assert run.run_end_time is not None and run.run_end_time.utcoffset().total_seconds() == -6 * 3600


def test_full_node_reads_lineage_mapping_and_tests_and_dumps_the_wire_shape() -> None:
    node = CoalesceNode.model_validate(FULL_NODE)
    assert (node.node_type, node.database, node.schema_name, node.location_name) == (
        "Fact", "DW_PROD", "INVENTORY", "INVENTORY"
    )  # fmt: skip
    column = node.metadata.columns[0]
    assert column.is_business_key and not column.nullable
    assert column.applied_column_tests == {"unique": True, "notNull": True}
    assert [(r.node_id, r.column_id) for r in column.sources[0].column_references] == [
        (STG_ID, "s-1"),
        (STG_ID, "s-2"),
    ]
    mapping = node.metadata.source_mapping[0]
    assert mapping.aliases == {"STG_ONHAND": STG_ID}
    assert mapping.dependencies[0].node_name == "STG_ONHAND"
    assert mapping.join and "ref('STAGE', 'STG_ONHAND')" in mapping.join.join_condition
    assert mapping.custom_sql and mapping.custom_sql.custom_sql == ""
    test = node.metadata.applied_node_tests[0]
    assert test.name == "NO_NEGATIVE_ONHAND" and test.template_string.startswith("SELECT * FROM {{ ref(")
    assert test.run_order == "After" and test.continue_on_failure is False
    # A field this client does not know is kept, not refused.
    assert test.model_extra == {"testCategory": "custom"}
    assert node.metadata.column_tests(column) == {"unique", "notNull"}
    # Dumping gives back the API's own names and keeps what was not declared.
    assert json.loads(node.model_dump_json()) == FULL_NODE


def test_summary_node_needs_no_detail() -> None:
    summary = CoalesceNodeSummary.model_validate(
        {
            "id": STG_ID,
            "name": "STG_ONHAND",
            "nodeType": "Stage",
            "database": "DW_PROD",
            "schema": "STAGE",
            "locationName": "STAGE",
        }  # fmt: skip
    )
    assert summary.schema_name == "STAGE"
    node = CoalesceNode.model_validate({"id": STG_ID, "name": "STG_ONHAND", "nodeType": "my-package:SCD2"})
    assert node.metadata.columns == [] and node.materialization_type is None


def test_malformed_response_names_endpoint_field_path_and_expectation() -> None:
    payload = {
        "data": [
            {"id": STG_ID, "name": "STG_ONHAND", "nodeType": "Stage"},
            {"id": FCT_ID, "name": "FCT_INVENTORY_POSITION"},
        ],
        "next": None,
    }
    with pytest.raises(CoalesceResponseError) as info:
        parse_response(CoalescePage[CoalesceNodeSummary], payload, "GET /api/v1/environments/2/nodes")
    assert info.value.endpoint == "GET /api/v1/environments/2/nodes"
    assert info.value.problems == ["data[1].nodeType: field required"]
    assert str(info.value) == (
        "Malformed response from Coalesce GET /api/v1/environments/2/nodes: data[1].nodeType: field required"
    )


def test_malformed_nested_field_reports_every_problem_with_what_was_expected() -> None:
    payload = {
        "data": [
            {
                "nodeID": FCT_ID,
                "name": "FCT_INVENTORY_POSITION",
                "queryResults": [
                    {"name": "Insert", "success": "maybe", "rowsInserted": "many", "startTime": "yesterday"}
                ],
            }
        ]
    }
    with pytest.raises(CoalesceResponseError) as info:
        parse_response(CoalesceRunResults, payload, "GET /api/v1/runs/7/results")
    problems = info.value.problems
    assert problems[0].startswith("data[0].queryResults[0].success: Input should be a valid boolean")
    assert problems[0].endswith("(got 'maybe')")
    assert problems[1].startswith("data[0].queryResults[0].startTime: Input should be a valid datetime")
    assert problems[2].startswith("data[0].queryResults[0].rowsInserted: Input should be a valid integer")


def test_a_body_of_the_wrong_kind_is_rejected_at_the_root() -> None:
    with pytest.raises(CoalesceResponseError, match=r"POST /scheduler/startRun: <body>: Input should be"):
        parse_response(CoalesceStartRunResponse, ["runCounter", 9], "POST /scheduler/startRun")
    with pytest.raises(CoalesceResponseError, match=r"runCounter: field required"):
        parse_response(CoalesceStartRunResponse, {"runID": 9}, "POST /scheduler/startRun")


@pytest.mark.parametrize(
    ("status", "terminal"),
    [
        ("waitingToRun", False),
        ("initializing", False),
        ("rendering", False),
        ("running", False),
        ("completed", True),
        ("failed", True),
        ("canceled", True),
    ],
)
def test_run_status_terminality(status: str, terminal: bool) -> None:
    assert CoalesceRunStatus(status).is_terminal is terminal


def test_an_unknown_run_status_or_type_is_kept_and_is_not_finished() -> None:
    # One new value must not refuse a whole page of runs: it is kept, and the run is looked at again.
    status = parse_response(
        CoalesceRunStatusResponse, {"runStatus": "cancelled", "runType": "dev"}, "GET /scheduler/runStatus"
    )
    assert status.run_status.value == "cancelled" and not status.run_status.is_known
    assert not status.run_status.is_terminal and status.run_type is not None and not status.run_type.is_known
    assert CoalesceRunStatus("canceled") is CoalesceRunStatus.CANCELED and CoalesceRunStatus.CANCELED.is_known
    with pytest.raises(CoalesceResponseError, match=r"runStatus: Input should be"):
        parse_response(CoalesceRunStatusResponse, {"runStatus": 3}, "GET /scheduler/runStatus")


def test_a_null_where_a_field_has_a_default_reads_as_the_default() -> None:
    node = json.loads(json.dumps(FULL_NODE))
    node["overrideSQL"] = None
    node["metadata"]["columns"][0]["transform"] = None
    node["metadata"]["sourceMapping"][0]["join"]["joinCondition"] = None
    page = parse_response(CoalescePage[CoalesceNode], {"data": [node], "next": None}, "GET nodes")
    (read,) = page.data
    assert read.override_sql is False and read.metadata.columns[0].transform == ""
    assert read.metadata.source_mapping[0].join is not None
    assert read.metadata.source_mapping[0].join.join_condition == ""
    # A null in a field the product cannot do without is still refused, naming it.
    node["metadata"]["columns"][0]["dataType"] = None
    with pytest.raises(CoalesceResponseError, match=r"data\[0\]\.metadata\.columns\[0\]\.dataType"):
        parse_response(CoalescePage[CoalesceNode], {"data": [node], "next": None}, "GET nodes")


def test_run_detail_with_refresh_run_details() -> None:
    run = CoalesceRun.model_validate(RUN)
    assert run.run_type is CoalesceRunType.REFRESH and run.run_status is CoalesceRunStatus.FAILED
    assert run.run_history == [40, 41] and run.re_run_id is None
    assert run.run_details is not None
    details = run.run_details
    assert (details.environment_id, details.job_id, details.nodes_in_run) == ("2", "1", 3)
    assert run.user_credentials is not None and run.user_credentials.snowflake_role == "PLANNING_OPS"
    assert run.model_extra == {"version": 1}


def test_run_credentials_drop_a_secret_the_server_echoes() -> None:
    echoed = {**RUN, "userCredentials": {**RUN["userCredentials"], "snowflakePassword": "hunter2-secret"}}
    run = CoalesceRun.model_validate(echoed)
    assert "hunter2-secret" not in repr(run)
    assert "hunter2-secret" not in run.model_dump_json()


def test_run_results_with_a_failed_query() -> None:
    results = CoalesceRunResults.model_validate(
        {
            "data": [
                {
                    "nodeID": FCT_ID,
                    "name": "FCT_INVENTORY_POSITION",
                    "isRunning": False,
                    "queryResults": [
                        {
                            "name": "Insert Data",
                            "sql": "INSERT INTO ...",
                            "status": "Failure",
                            "success": False,
                            "isRunning": False,
                            "startTime": "2024-03-05T08:01:00Z",
                            "endTime": "2024-03-05T08:01:02Z",
                            "queryID": "01b2-0000",
                            "rowsInserted": 0,
                            "rowsUpdated": 0,
                            "rowsDeleted": 0,
                            "warehouse": "TRANSFORM_WH",
                            "error": {
                                "errorString": "SQL compilation error",
                                "errorDetail": "invalid identifier",
                            },
                        }
                    ],
                }
            ]
        }
    )
    query = results.data[0].query_results[0]
    assert not query.success
    assert query.error is not None and query.error.error_detail == "invalid identifier"
    assert results.data[0].run_state is None


def test_pages_take_cursors_and_ids_given_as_numbers() -> None:
    page = CoalescePage[CoalesceJob].model_validate(
        {
            "data": [{"id": 1, "name": "inventory_nightly", "includeSelector": "{location: STAGE}"}],
            "next": 25,
            "limit": 1,
        }  # fmt: skip
    )
    assert page.next == "25" and page.data[0].id == "1" and page.data[0].exclude_selector == ""


def test_user_credentials_never_show_their_secrets() -> None:
    creds = credentials(snowflakeKeyPairPass="pass-secret")
    for text in (repr(creds), str(creds), creds.model_dump_json(), json.dumps(creds.model_dump(mode="json"))):
        assert "hunter2-secret" not in text and "pass-secret" not in text
    # Only the request body carries them, under the API's names.
    assert creds.to_request_body() == {
        "snowflakeUsername": "PLANNING_OPS",
        "snowflakePassword": "hunter2-secret",
        "snowflakeKeyPairPass": "pass-secret",
        "snowflakeWarehouse": "TRANSFORM_WH",
        "snowflakeRole": "PLANNING_OPS",
        "snowflakeAuthType": "Basic",
    }


def test_user_credentials_need_the_secret_of_their_auth_type() -> None:
    with pytest.raises(ValidationError, match="Basic needs snowflakePassword"):
        CoalesceUserCredentials(snowflake_username="U")
    with pytest.raises(ValidationError, match="KeyPair needs snowflakeKeyPairKey"):
        CoalesceUserCredentials(snowflake_username="U", snowflake_auth_type="KeyPair")
    key_pair = CoalesceUserCredentials(
        snowflake_username="U", snowflake_auth_type="KeyPair", snowflake_key_pair_key="-----BEGIN KEY-----"
    )
    assert key_pair.to_request_body()["snowflakeKeyPairKey"] == "-----BEGIN KEY-----"
    with pytest.raises(ValidationError, match="snowflakePasword"):
        credentials(snowflakePasword="typo")


def test_start_run_request_sends_ids_as_strings() -> None:
    request = CoalesceStartRunRequest(
        run_details=CoalesceStartRunDetails(
            environment_id=2, job_id=1, include_nodes_selector="{FCT_INVENTORY_POSITION}+"
        ),
        user_credentials=credentials(),
        parameters={"REGION": "SOUTH"},
    )
    body = request.to_request_body()
    assert body["runDetails"] == {
        "environmentID": "2",
        "jobID": "1",
        "includeNodesSelector": "{FCT_INVENTORY_POSITION}+",
        "parallelism": 16,
    }
    assert body["userCredentials"]["snowflakePassword"] == "hunter2-secret"
    assert body["parameters"] == {"REGION": "SOUTH"}
    assert "hunter2-secret" not in repr(request)


def test_rerun_and_cancel_request_bodies() -> None:
    rerun = CoalesceRerunRequest(run_details=CoalesceRerunDetails(run_id=42), user_credentials=credentials())
    assert rerun.to_request_body()["runDetails"] == {"runID": "42"}
    cancel = CoalesceCancelRunRequest(run_id=42, environment_id=2, org_id="7")
    assert cancel.to_request_body() == {"runID": 42, "environmentID": "2", "orgID": "7"}


def test_workspace_data_round_trips_through_json() -> None:
    data = CoalesceWorkspaceData(
        base_url="https://app.eu.coalescesoftware.io",
        fetched_at=datetime(2024, 3, 5, 2, 30, tzinfo=UTC),
        environments=[
            CoalesceEnvironmentData(
                environment=CoalesceEnvironment(id="2", name="PROD", status="Waiting"),
                nodes=[CoalesceNode.model_validate(FULL_NODE)],
                jobs=[CoalesceJob(id="1", name="inventory_nightly", include_selector="{location: STAGE}")],
            )
        ],
    )
    restored = CoalesceWorkspaceData.model_validate_json(data.model_dump_json())
    assert restored == data
    node_test = restored.environments[0].nodes[0].metadata.applied_node_tests[0]
    assert node_test.model_extra == {"testCategory": "custom"}
    assert restored.model_dump_json() == data.model_dump_json()


def test_error_messages() -> None:
    error = CoalesceAPIError(503, "Service Unavailable", None, endpoint="GET /api/v1/runs", retries=3)
    assert str(error) == (
        "Coalesce GET /api/v1/runs returned 503: Service Unavailable; gave up after 3 retries"
    )
    timeout = CoalesceRunTimeoutError(run_id=42, timeout=2.5, last_status=CoalesceRunStatus.RUNNING)
    assert str(timeout) == "Coalesce run 42 did not finish within 2.5 s (last status: running)"
