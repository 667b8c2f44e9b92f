"""The context file: teams and the systems around the pipeline, validated with pydantic.

```yaml
teams:
  planning-ops:
    name: Planning operations
    slack_channel: "#planning-ops"
    members: [{name: Dana Ortiz, email: dana.ortiz@example.com, slack_user_id: U0PLAN01}]
systems:
  - key: qlik_replicate/ebs_inventory_cdc
    name: Qlik Replicate task EBS inventory CDC
    kind: qlik
    owners: [data-platform]
    upstream: [oracle_ebs/mtl_onhand_quantities_detail]
    feeds: [raw_ebs/mtl_onhand_quantities_detail]
coalesce_owners:
  - {match: "ref_planning/*", owners: [planning-ops]}
```
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from dw_dagster.config import FileModel, load_yaml_model

_KEY_PATTERN = r"^[a-z0-9_\-]+(/[a-z0-9_\-]+)*$"




class Person(FileModel):
    name: str
    email: str = Field(pattern=r"^[^@\s]+@[^@\s]+$")
    slack_user_id: str | None = None


class Team(FileModel):
    name: str
    slack_channel: str = Field(pattern=r"^#[a-z0-9_\-]+$")
    members: list[Person] = Field(default_factory=list)


class ConsumerRead(FileModel):
    """When a consumer reads the asset, so the blast radius can say who sees a bad number next."""

    what: str
    cron: str
    timezone: str = "UTC"


class ContextSystem(FileModel):
    key: str = Field(pattern=_KEY_PATTERN, description="Asset key path, e.g. 'thoughtspot/network_dos'.")
    name: str
    kind: str = Field(description="Shown as a Dagster kind, e.g. oracle, qlik, thoughtspot.")
    description: str = ""
    owners: list[str] = Field(min_length=1, description="Team ids from `teams`.")
    upstream: list[str] = Field(default_factory=list, description="Asset keys this system reads.")
    feeds: list[str] = Field(
        default_factory=list, description="Asset keys (e.g. Coalesce source nodes) that read this system."
    )
    reads: list[ConsumerRead] = Field(default_factory=list)

    @field_validator("upstream", "feeds")
    @classmethod
    def _keys(cls, keys: list[str]) -> list[str]:
        for k in keys:
            if not re.match(_KEY_PATTERN, k):
                raise ValueError(f"expected an asset key path like 'schema/table', got {k!r}")
        return keys


class OwnerRule(FileModel):
    match: str = Field(description="A glob over asset key paths, e.g. 'raw_ebs/*'. First match wins.")
    owners: list[str] = Field(min_length=1)


class ContextFile(FileModel):
    teams: dict[str, Team]
    systems: list[ContextSystem] = Field(default_factory=list)
    coalesce_owners: list[OwnerRule] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references(self) -> ContextFile:
        for i, system in enumerate(self.systems):
            for owner in system.owners:
                if owner not in self.teams:
                    raise ValueError(f"systems[{i}] ({system.key}).owners: unknown team {owner!r}")
        for i, rule in enumerate(self.coalesce_owners):
            for owner in rule.owners:
                if owner not in self.teams:
                    raise ValueError(f"coalesce_owners[{i}].owners: unknown team {owner!r}")
        keys = [s.key for s in self.systems]
        dupes = {k for k in keys if keys.count(k) > 1}
        if dupes:
            raise ValueError(f"systems: duplicate keys {sorted(dupes)}")
        return self

    def owners_for(self, key_path: str) -> Sequence[str]:
        """Owner teams of a Coalesce node asset, by the first matching rule."""
        for rule in self.coalesce_owners:
            if fnmatch.fnmatchcase(key_path, rule.match):
                return rule.owners
        return ()


def load_context_file(path: str | Path) -> ContextFile:
    return load_yaml_model(path, ContextFile, "context file", "DW_CONTEXT_FILE")
