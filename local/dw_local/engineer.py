"""The node owner at work in the Coalesce app, for the local world: applies a proposed node change to the
workspace and deploys it, through the simulator's workspace and deploy endpoints.

dw-dagster never does this itself (it proposes node changes as diffs); the demo and the tests need a
person to, and this is what that person does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from dw_dagster.records.remediation import NodeChange


def apply_to_api_node(api_node: dict[str, Any], proposed: Mapping[str, Any]) -> dict[str, Any]:
    """The node in the API's full shape with the proposed definition (join, column transforms, node tests)."""
    node = {**api_node, "metadata": dict(api_node["metadata"])}
    mapping = [dict(m) for m in node["metadata"].get("sourceMapping", [])]
    if mapping:
        mapping[0]["join"] = {**mapping[0].get("join", {}), "joinCondition": proposed["join"]}
    transforms = {c["name"]: c["transform"] for c in proposed["columns"]}
    columns = []
    for c in node["metadata"]["columns"]:
        c = dict(c)
        if c["name"] in transforms and transforms[c["name"]] != (c.get("transform") or ""):
            c["transform"] = transforms[c["name"]]
            c["sources"] = [{**s, "transform": transforms[c["name"]]} for s in c.get("sources", [])]
        columns.append(c)
    # A test kept from before keeps its description, run order and continue-on-failure as the owner set them.
    existing = {t["name"]: t for t in node["metadata"].get("appliedNodeTests", [])}
    node["metadata"] = {
        **node["metadata"],
        "sourceMapping": mapping,
        "columns": columns,
        "appliedNodeTests": [
            {
                "description": "",
                "continueOnFailure": False,
                "runOrder": "After",
                **existing.get(t["name"], {}),
                "name": t["name"],
                "templateString": t["sql"],
            }
            for t in proposed["nodeTests"]
        ],
    }
    return node


def apply_and_deploy(coalesce_url: str, token: str, change: NodeChange) -> int:
    """Edits the node in the workspace as proposed and deploys to its environment; returns the deploy run."""
    headers = {"Authorization": f"Bearer {token}"}
    url = f"{coalesce_url}/_sim/workspace/nodes/{change.node_id}"
    params = {"environmentID": change.environment_id}
    with httpx.Client(headers=headers, timeout=60) as http:
        current = http.get(url, params=params)
        current.raise_for_status()
        edited = http.put(url, params=params, json=apply_to_api_node(current.json(), change.after))
        edited.raise_for_status()
        deployed = http.post(f"{coalesce_url}/_sim/deploy", json={"environmentID": change.environment_id})
        deployed.raise_for_status()
        return int(deployed.json()["runCounter"])
