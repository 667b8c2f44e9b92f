"""A project's environments and nodes in the shapes of Coalesce's API (``docs/coalesce-api.md``): a node as
listed and in full detail (columns, column lineage, source mapping, tests).
"""

from __future__ import annotations

import re
from typing import Any

from dw_dagster.coalesce.sql import find_refs
from dw_local.coalesce_sim.project_specs import EnvironmentSpec, NodeSpec, ProjectInfo, column_id, node_id

# Fields the file does not carry, reported the same for every environment.
ENVIRONMENT_CREATED_AT = "2024-01-08T15:00:00.000Z"
ENVIRONMENT_CREATED_BY = {"id": "1", "firstName": "Local", "lastName": "Simulator"}


def environment_to_api(env: EnvironmentSpec, project: ProjectInfo, status: str, full: bool) -> dict[str, Any]:
    """An environment as listed, or in full (``full``) as ``GET /api/v1/environments/{id}`` answers, with
    its default ``runTimeParameters`` (https://docs.coalesce.io/docs/api/coalesce/get-environment lists
    them; the listing's fields are the OpenAPI v6.2 ``BaseEnvironment``'s)."""
    shape = {
        "id": env.id,
        "name": env.name,
        "project": project.id,
        "createdAt": ENVIRONMENT_CREATED_AT,
        "createdBy": dict(ENVIRONMENT_CREATED_BY),
        "status": status,
    }
    if full:
        shape["runTimeParameters"] = dict(env.runTimeParameters)
    return shape


def node_summary(node: NodeSpec, env: EnvironmentSpec) -> dict[str, Any]:
    database, schema, _ = env.table(node.locationName, node.name)
    return {
        "id": node.id,
        "name": node.name,
        "nodeType": node.nodeType,
        "database": database,
        "schema": schema,
        "locationName": node.locationName,
    }


_ALIAS = re.compile(r"""\s+(?:AS\s+)?"([^"]+)\"""", re.IGNORECASE)


def _aliases(join: str) -> dict[str, str]:
    """``{alias: nodeID}`` for refs followed by an alias other than the node's own name."""
    aliases = {}
    for match in re.finditer(r"\{\{[^}]*\}\}", join):
        refs = find_refs(match[0])
        alias = _ALIAS.match(join, match.end())
        if refs and alias and alias[1] != refs[0][1]:
            aliases[alias[1]] = node_id(*refs[0])
    return aliases


def _column_reference(source: str) -> dict[str, str]:
    location, name, column = source.split(".")
    return {"nodeID": node_id(location, name), "columnID": column_id(location, name, column)}


def node_detail(node: NodeSpec, env: EnvironmentSpec) -> dict[str, Any]:
    refs = find_refs(node.join)
    return {
        **node_summary(node, env),
        "description": node.description,
        "config": {},
        "metadata": {
            "columns": [
                {
                    "columnID": node.column_id(c.name),
                    "name": c.name,
                    "dataType": c.dataType,
                    "description": c.description,
                    "nullable": c.nullable,
                    "transform": c.transform or "",
                    "isBusinessKey": c.isBusinessKey,
                    "isSurrogateKey": c.isSurrogateKey,
                    "primaryKey": c.primaryKey,
                    "uniqueKey": c.uniqueKey,
                    "appliedColumnTests": {test: True for test in c.tests},
                    "sources": [
                        {
                            "transform": c.transform or "",
                            "columnReferences": [_column_reference(s) for s in c.sources],
                        }
                    ],
                }
                for c in node.columns
            ],
            "sourceMapping": [
                {
                    "name": node.name,
                    "aliases": _aliases(node.join),
                    "customSQL": {"customSQL": ""},
                    "dependencies": [{"locationName": loc, "nodeName": name} for loc, name in refs],
                    "join": {"joinCondition": node.join},
                    "noLinkRefs": [],
                }
            ],
            "appliedNodeTests": [
                {
                    "name": t.name,
                    "description": t.description,
                    "continueOnFailure": t.continueOnFailure,
                    "runOrder": t.runOrder,
                    "templateString": t.sql,
                }
                for t in node.tests
            ],
            "cteString": "",
            "enabledColumnTestIDs": sorted({test for c in node.columns for test in c.tests}),
        },
        "materializationType": node.materialization,
        "isMultisource": False,
        "overrideSQL": False,
    }
