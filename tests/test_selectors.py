"""Coalesce selectors: parsing, errors, and which nodes they select in a small graph.

The graph (Sources on the left):

    RAW.ORDERS (Source) -> STAGE.STG_ORDERS -----------> MART.FCT_SALES -> MART.V_REGION_TOTALS
    RAW.CUSTOMERS (Source) -> STAGE.STG_CUSTOMERS -> MART.DIM_CUSTOMER --^
    STAGE.STG_CALENDAR
"""

from __future__ import annotations

import pytest

from dw_dagster.coalesce.selectors import (
    SelectorError,
    SelectorGraph,
    SelectorNode,
    SelectorTerm,
    _matches,
    as_selector_node,
    parse_selector,
    select_nodes,
)
from dw_dagster.coalesce.workspace_models import CoalesceNode

NODES = [
    SelectorNode("orders", "ORDERS", "RAW", "Source"),
    SelectorNode("customers", "CUSTOMERS", "RAW", "Source"),
    SelectorNode("stg_orders", "STG_ORDERS", "STAGE", "Stage", dependencies=(("RAW", "ORDERS"),)),
    SelectorNode("stg_customers", "STG_CUSTOMERS", "STAGE", "Stage", dependencies=(("RAW", "CUSTOMERS"),)),
    SelectorNode("stg_calendar", "STG_CALENDAR", "STAGE", "Stage", frozenset({"Calendars"})),
    SelectorNode(
        "dim_customer", "DIM_CUSTOMER", "MART", "Dimension", frozenset({"My Dimensions"}),
        (("STAGE", "STG_CUSTOMERS"),),
    ),
    SelectorNode(
        "fct_sales", "FCT_SALES", "MART", "Fact",
        dependencies=(("STAGE", "STG_ORDERS"), ("MART", "DIM_CUSTOMER")),
    ),
    SelectorNode("v_region_totals", "V_REGION_TOTALS", "MART", "View", dependencies=(("MART", "FCT_SALES"),)),
]  # fmt: skip


def select(include: str, exclude: str = "") -> set[str]:
    return select_nodes(include, exclude, NODES)


@pytest.mark.parametrize(
    ("include", "expected"),
    [
        ("{name: FCT_SALES}", {"fct_sales"}),
        ("{name:STG_*}", {"stg_orders", "stg_customers", "stg_calendar"}),
        ("{name: *customer*}", {"customers", "stg_customers", "dim_customer"}),
        ("{location: MART}", {"dim_customer", "fct_sales", "v_region_totals"}),
        ('{nodeType:"Dimension"}', {"dim_customer"}),
        ("{nodeID: stg_calendar}", {"stg_calendar"}),
        ('{subgraph: "My Dimensions"}', {"dim_customer"}),
        # Attributes in one brace are ANDed.
        ("{location: STAGE name: *ORDERS}", {"stg_orders"}),
        ("{location: MART nodeType: Stage}", set()),
        ("{name: STG_CALENDAR} OR {nodeType: View}", {"stg_calendar", "v_region_totals"}),
        ("{location: MART} AND {name: *S}", {"fct_sales", "v_region_totals"}),
        ("{name: STG_CALENDAR} OR {location: MART} AND {nodeType: Fact}", {"stg_calendar", "fct_sales"}),
        ("{name: DIM_CUSTOMER}+", {"dim_customer", "fct_sales", "v_region_totals"}),
        ("+{name: DIM_CUSTOMER}", {"dim_customer", "stg_customers", "customers"}),
        (
            "+{name: FCT_SALES}",
            {"fct_sales", "stg_orders", "orders", "dim_customer", "stg_customers", "customers"},
        ),
        ("+{name: STG_ORDERS}+", {"orders", "stg_orders", "fct_sales", "v_region_totals"}),
        ("", set()),
    ],
)
def test_include(include: str, expected: set[str]) -> None:
    assert select(include) == expected


def test_exclude_is_taken_away_from_include() -> None:
    assert select("{location: STAGE} OR {location: MART}", "{name: STG_CALENDAR}") == {
        "stg_orders", "stg_customers", "dim_customer", "fct_sales", "v_region_totals",
    }  # fmt: skip
    assert select("{location: MART}", "{name: FCT_SALES}+") == {"dim_customer"}


def test_explicit_edges_replace_the_dependencies() -> None:
    assert select_nodes("{name: STG_CALENDAR}+", None, NODES, edges=[("stg_calendar", "fct_sales")]) == {
        "stg_calendar",
        "fct_sales",
    }


def test_api_nodes_as_dicts_or_client_models() -> None:
    api_nodes = [
        {"id": "a", "name": "STG_A", "locationName": "STAGE", "nodeType": "Stage"},
        {
            "id": "b",
            "name": "FCT_B",
            "locationName": "MART",
            "nodeType": "Fact",
            "metadata": {
                "sourceMapping": [
                    {"name": "FCT_B", "dependencies": [{"locationName": "STAGE", "nodeName": "STG_A"}]}
                ]
            },
        },
    ]
    assert select_nodes("{name: STG_A}+", None, api_nodes) == {"a", "b"}
    models = [CoalesceNode.model_validate(n) for n in api_nodes]
    assert select_nodes("+{nodeType: Fact}", None, models) == {"a", "b"}
    # The state's node records are read field by field, as the API's dicts are.
    assert [as_selector_node(m) for m in models] == [as_selector_node(n) for n in api_nodes]
    assert as_selector_node(models[1]).dependencies == (("STAGE", "STG_A"),)


def test_parsed_terms() -> None:
    selector = parse_selector("+{location: SRC name: 'My Node'}+ OR {nodeID: 98}")
    assert selector.clauses == (
        (SelectorTerm((("location", "SRC"), ("name", "My Node")), upstream=True, downstream=True),),
        (SelectorTerm((("nodeID", "98"),)),),
    )
    assert parse_selector("  ").is_empty and parse_selector(None).is_empty


@pytest.mark.parametrize(
    ("text", "position", "problem"),
    [
        ("{name: FCT_SALES", 16, "expected '}'"),
        ("{colour: red}", 1, "unknown attribute 'colour'"),
        ("{FCT_SALES}+", 1, "expected 'attribute: value'"),
        ("{name: A} {name: B}", 10, "expected OR, AND or the end"),
        ("{name: A} OR", 12, "expected a term after the operator"),
        ("{name: }", 7, "expected a value for 'name'"),
        ("{}", 1, "empty term"),
        ("name: A", 0, "expected '{'"),
    ],
)
def test_errors_name_the_text_and_the_position(text: str, position: int, problem: str) -> None:
    with pytest.raises(SelectorError) as info:
        parse_selector(text)
    assert (info.value.text, info.value.position) == (text, position)
    assert problem in str(info.value) and repr(text) in str(info.value)
    with pytest.raises(SelectorError):
        select_nodes(text, None, NODES)
    with pytest.raises(SelectorError):
        select_nodes("{name: A}", text, NODES)


def test_a_pattern_without_a_star_selects_what_matching_every_node_selects() -> None:
    # Such patterns are looked up in an index of each attribute's values, not matched against each node: the
    # same nodes whatever the case, and a non-ASCII value matched as Python's case-insensitive regex does
    # ("ſ" is "s" to it; "İ" lower-cases to two characters).
    odd = [
        SelectorNode("long_s", "ſTG_X", "STAGE", "Stage"),
        SelectorNode("dotted", "İD", "MART", "Fact"),
        SelectorNode("mixed", "Stg_Mixed", "stage", "stage"),
    ]
    graph = SelectorGraph.from_nodes([*NODES, *odd])
    for attribute, pattern in [
        ("name", "stg_x"), ("name", "STG_X"), ("name", "id"), ("name", "İD"), ("name", "stg_mixed"),
        ("location", "Stage"), ("location", "mart"), ("nodeType", "STAGE"), ("nodeID", "FCT_SALES"),
        ("name", "FCT_SALES"), ("name", "NO_SUCH_NODE"),
    ]:  # fmt: skip
        every = {n.id for n in graph.nodes if _matches(n, attribute, pattern)}
        assert graph.matching(attribute, pattern) == every, (attribute, pattern)
    assert graph.matching("name", "stg_x") == {"long_s"}
    assert graph.matching("location", "stage") == {
        "stg_orders",
        "stg_customers",
        "stg_calendar",
        "long_s",
        "mixed",
    }


def test_a_term_without_attributes_is_every_node() -> None:
    assert SelectorGraph.from_nodes(NODES).term(SelectorTerm(())) == {n.id for n in NODES}
