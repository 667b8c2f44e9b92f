"""The context file: teams and the systems around the pipeline, validated with pydantic.

```yaml
teams:
  sales-ops:
    name: Sales operations
    slack_channel: "#sales-ops"
    members: [{name: Sam Lee, email: sam.lee@example.com, slack_user_id: U0SALES01}]
systems:
  - key: replication/crm_cdc
    name: The replication's CRM change data capture
    kind: replication
    owners: [data-platform]
    upstream: [crm/accounts]
    feeds: [raw_crm/accounts]
coalesce_owners:
  - {match: "ref_sales/*", owners: [sales-ops]}
```
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from dw_dagster.config import (
    FileModel,
    load_yaml_model,
    validate_cron,
    validate_read_only_sql,
    validate_timezone,
)
from dw_dagster.context.governance import GovernanceConfig
from dw_dagster.sql import positional

_KEY_PATTERN = r"^[a-z0-9_\-]+(/[a-z0-9_\-]+)*$"
_ENV_VAR = r"^[A-Z_][A-Z0-9_]*$"


class RunAs(FileModel):
    """The Snowflake identity a person's approved Coalesce reruns start with (their own, never a shared
    service identity). The secret stays in the environment: ``password_env`` names the variable holding a
    password or, in its place, a programmatic access token; or ``private_key_env`` the one holding the
    private key of the user's key pair (with ``private_key_passphrase_env`` for an encrypted key)."""

    snowflake_username: str
    snowflake_role: str | None = None
    snowflake_warehouse: str | None = None
    password_env: str | None = Field(
        default=None,
        pattern=_ENV_VAR,
        description="Environment variable with the password, or a programmatic access token in its place "
        "(Snowflake takes one wherever a password goes); sent to Coalesce as snowflakeAuthType Basic.",
    )
    private_key_env: str | None = Field(
        default=None,
        pattern=_ENV_VAR,
        description="Environment variable with the PEM private key (or its base64) whose public key is set "
        "on the Snowflake user; sent to Coalesce as snowflakeAuthType KeyPair (snowflakeKeyPairKey).",
    )
    private_key_passphrase_env: str | None = Field(
        default=None,
        pattern=_ENV_VAR,
        description="Environment variable with the passphrase of an encrypted private key (snowflakeKeyPairPass).",
    )

    @model_validator(mode="after")
    def _one_credential(self) -> RunAs:
        if (self.password_env is None) == (self.private_key_env is None):
            given = "both" if self.password_env else "neither"
            raise ValueError(
                f"expected one of password_env (a password or programmatic access token) and private_key_env "
                f"(a key pair), got {given}"
            )
        if self.private_key_passphrase_env and not self.private_key_env:
            raise ValueError(
                "private_key_passphrase_env is the passphrase of private_key_env's key: set both"
            )
        return self


class Person(FileModel):
    name: str
    email: str = Field(pattern=r"^[^@\s]+@[^@\s]+$")
    slack_user_id: str | None = Field(
        default=None,
        pattern=r"^[UW][A-Z0-9]{2,}$",
        description="Their Slack member id (profile → Copy member ID): a click on Approve in Slack is theirs.",
    )
    approver_key: str | None = Field(
        default=None,
        pattern=r"^ed25519:[A-Za-z0-9+/]{43}=$",
        description="The public half of their approver key (`dw-dagster approver-key new`): the command line "
        "proves who approves with the private half, which only they hold.",
    )
    run_as: RunAs | None = Field(default=None, description="Needed to approve a rerun (see RunAs).")


class Team(FileModel):
    name: str
    slack_channel: str = Field(pattern=r"^#[a-z0-9_\-]+$")
    members: list[Person] = Field(default_factory=list)


class ConsumerRead(FileModel):
    """When a consumer reads the asset, so the blast radius can say who sees a bad number next."""

    what: str
    cron: str
    timezone: str = "UTC"

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str) -> str:
        return validate_cron(v)

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        return validate_timezone(v)


class ContextSystem(FileModel):
    key: str = Field(pattern=_KEY_PATTERN, description="Asset key path, e.g. 'dashboard/sales_overview'.")
    name: str
    kind: str = Field(description="Shown as a Dagster kind, e.g. postgres, replication, dashboard.")
    description: str = ""
    owners: list[str] = Field(min_length=1, description="Team ids from `teams`.")
    upstream: list[str] = Field(default_factory=list, description="Asset keys this system reads.")
    feeds: list[str] = Field(
        default_factory=list, description="Asset keys (e.g. Coalesce source nodes) that read this system."
    )
    reads: list[ConsumerRead] = Field(default_factory=list)
    group: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_]+$",
        description="The asset group shown in the UI; by default the first part of the key.",
    )

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


class Autonomy(str, Enum):
    """How much dw-dagster may do on its own in a domain (PRODUCT.md, "Autonomy")."""

    L0 = "L0"  # manual: nothing automated
    L1 = "L1"  # observe: detect, diagnose, alert with blast radius; change nothing
    L2 = "L2"  # propose: fixes and scoped reruns wait for the named owners' approval
    L3 = "L3"  # act reversibly under a standing approval for a narrow class of action
    L4 = "L4"  # autonomous in a scoped domain: warn every downstream reader on the first bad build

    def at_least(self, level: Autonomy) -> bool:
        return int(self.value[1]) >= int(level.value[1])


class Domain(FileModel):
    assets: list[str] = Field(min_length=1, description="Globs over asset key paths, e.g. 'mart/*'.")
    autonomy: Autonomy = Autonomy.L1
    standing_approvals: list[Literal["hold_notice"]] = Field(
        default_factory=list, description="Classes of reversible action allowed at once (L3 and up)."
    )
    hold_channel_team: str | None = Field(
        default=None, description="The team whose channel gets hold notices (the consumers, e.g. finance)."
    )
    hold_action: str = Field(
        default="Hold decisions",
        min_length=1,
        description="What the hold notice asks the consumers to do on the flagged items while an incident is"
        " open, in the imperative (e.g. 'Hold outgoing payments').",
    )
    approval_timeout_hours: float = Field(
        default=12.0, gt=0, description="An unanswered approval request expires (and escalates) after this."
    )
    escalation_team: str | None = Field(
        default=None, description="Told when an approval expires or a verification fails (else the owners)."
    )


class ReferenceTable(FileModel):
    """A hand-maintained table that joins key values to attributes (e.g. sales ops' account segment map).

    When a key is missing from it, dw-dagster drafts the row for its owner to approve: ``draft_sql``
    returns columns for the key (bound as ``%(key)s``), ``copy_from_donor`` columns come from the row of
    the key the missing one took its units from (a new account usually sits in the segment of the account it
    was split from), and whatever stays empty the owner gives when approving (``--set COLUMN=VALUE``).
    """

    asset: str = Field(pattern=_KEY_PATTERN, description="The Coalesce Source node's asset key path.")
    key_column: str
    draft_sql: str | None = None
    copy_from_donor: list[str] = Field(default_factory=list)
    audit_columns: dict[Literal["by", "at"], str] = Field(
        default_factory=dict, description="Columns that record who added a row and when."
    )

    @field_validator("draft_sql")
    @classmethod
    def _one_read_only_statement(cls, v: str | None) -> str | None:
        if v is None:
            return None
        try:
            positional(v, {"key": None})
        except ValueError as e:
            raise ValueError(f"binds only the missing key, written %(key)s: {e}") from None
        return validate_read_only_sql(v)


class ContextFile(FileModel):
    teams: dict[str, Team]
    country: str | None = Field(
        default=None,
        description="Where the business is, as ISO 3166: 'DE', or 'DE-NW' with its subdivision (a state, a "
        "province). Its public holidays are the metrics file's calendar's unless that names its own "
        "(docs/watch.md).",
    )
    systems: list[ContextSystem] = Field(default_factory=list)
    coalesce_owners: list[OwnerRule] = Field(default_factory=list)
    domains: dict[str, Domain] = Field(default_factory=dict)
    reference_tables: list[ReferenceTable] = Field(default_factory=list)
    governance: GovernanceConfig | None = Field(
        default=None, description="Who owns sensitive data and what looks sensitive (docs/governance.md)."
    )

    @field_validator("country")
    @classmethod
    def _country(cls, v: str | None) -> str | None:
        if v is None:
            return v
        import holidays

        code, _, subdivision = v.partition("-")
        try:
            holidays.country_holidays(code, years=2025)
        except NotImplementedError as e:
            raise ValueError(
                f"expected an ISO 3166 country code the holidays package knows ('DE', or 'DE-NW' with a "
                f"subdivision), got {v!r}"
            ) from e
        if subdivision:
            try:
                holidays.country_holidays(code, subdiv=subdivision, years=2025)
            except (NotImplementedError, ValueError) as e:
                known = ", ".join(holidays.list_supported_countries().get(code, [])[:20])
                raise ValueError(f"{code} has no subdivision {subdivision!r} (it has {known})") from e
        return v

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
        for i, owner in enumerate(self.governance.owners if self.governance else ()):
            if owner not in self.teams:
                raise ValueError(f"governance.owners[{i}]: unknown team {owner!r}")
        for name, domain in self.domains.items():
            for field in ("hold_channel_team", "escalation_team"):
                team = getattr(domain, field)
                if team and team not in self.teams:
                    raise ValueError(f"domains.{name}.{field}: unknown team {team!r}")
        # A person is matched by name or email when approving, by Slack id when clicking and by key when
        # signing: each must name one person only, and one person is the same wherever they appear.
        people: dict[str, str] = {}
        seen: dict[str, Person] = {}
        for team_id, team in self.teams.items():
            for i, m in enumerate(team.members):
                handles = [m.name.lower(), m.email.lower(), m.slack_user_id, m.approver_key]
                for handle in filter(None, handles):
                    if people.setdefault(handle, m.email.lower()) != m.email.lower():
                        raise ValueError(
                            f"teams.{team_id}.members[{i}]: {handle!r} names two different people"
                        )
                first = seen.setdefault(m.email.lower(), m)
                if first != m:
                    raise ValueError(
                        f"teams.{team_id}.members[{i}] ({m.email}): listed again with other details; a person "
                        "in several teams is written the same way in each"
                    )
        keys = [s.key for s in self.systems]
        dupes = {k for k in keys if keys.count(k) > 1}
        if dupes:
            raise ValueError(f"systems: duplicate keys {sorted(dupes)}")
        return self

    def domain_of(self, key_path: str) -> tuple[str, Domain] | None:
        """The first domain whose globs match the asset; assets in no domain are observed only (L1)."""
        for name, domain in self.domains.items():
            if any(fnmatch.fnmatchcase(key_path, g) for g in domain.assets):
                return name, domain
        return None

    def person(self, name_or_email: str) -> Person | None:
        """A team member by name or email (case-insensitive)."""
        wanted = name_or_email.strip().lower()
        for team in self.teams.values():
            for m in team.members:
                if wanted in (m.name.lower(), m.email.lower()):
                    return m
        return None

    def person_by_slack_id(self, slack_user_id: str) -> Person | None:
        return next(
            (m for t in self.teams.values() for m in t.members if m.slack_user_id == slack_user_id), None
        )

    def person_by_key(self, approver_key: str) -> Person | None:
        return next(
            (m for t in self.teams.values() for m in t.members if m.approver_key == approver_key), None
        )

    def teams_of(self, person: Person) -> list[str]:
        return [t for t, team in self.teams.items() if any(m.email == person.email for m in team.members)]

    def reference_table(self, key_path: str) -> ReferenceTable | None:
        return next((r for r in self.reference_tables if r.asset == key_path), None)

    def owners_for(self, key_path: str) -> Sequence[str]:
        """Owner teams of a Coalesce node asset, by the first matching rule."""
        for rule in self.coalesce_owners:
            if fnmatch.fnmatchcase(key_path, rule.match):
                return rule.owners
        return ()


def load_context_file(path: str | Path) -> ContextFile:
    return load_yaml_model(path, ContextFile, "context file", "DW_CONTEXT_FILE")
