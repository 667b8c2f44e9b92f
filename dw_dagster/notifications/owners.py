"""Owners as people read them: the context file's team names and channels, with mentions where wanted."""

from __future__ import annotations

from collections.abc import Sequence

from dw_dagster.context.models import ContextFile
from dw_dagster.notifications.text import escape


def owner_team(owner: str, context: ContextFile | None) -> str | None:
    """The context file's team id for an owner as assets carry it: ``team:sales-ops`` (Dagster's
    owner form), ``sales-ops``, or a member's email."""
    if context is None:
        return None
    name = owner.removeprefix("team:")
    if name in context.teams:
        return name
    if "@" in owner:
        for team_id, team in context.teams.items():
            if any(m.email.lower() == owner.lower() for m in team.members):
                return team_id
    return None


def team_label(owner: str, context: ContextFile | None, mention: bool = False) -> str:
    """``Sales operations (#sales-ops)``, with member mentions when ``mention``."""
    team_id = owner_team(owner, context)
    team = context.teams[team_id] if context and team_id else None
    if team is None:
        return escape(owner.removeprefix("team:"))
    text = f"{escape(team.name)} ({escape(team.slack_channel)})"
    if mention:
        people = " ".join(f"<@{m.slack_user_id}>" for m in team.members if m.slack_user_id)
        if people:
            text += f" {people}"
    return text


def owners_text(teams: Sequence[str], context: ContextFile | None, mention: bool = False) -> str:
    return ", ".join(team_label(t, context, mention) for t in teams) or "no owner on record"
