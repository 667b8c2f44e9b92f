"""The hold notice: the consumers are asked to hold on the newly flagged items while the incident is open.

Sent at once to the consumers only where autonomy allows acting under a standing approval
(:func:`hold_notice`); elsewhere proposed to the owners, for a person to forward (:func:`proposed_hold_notice`).
The action, the item noun and the consumers' names are the pipeline's own (:class:`Wording`, the context
file's teams).
"""

from __future__ import annotations

from collections.abc import Sequence

from slack_sdk.models.blocks import Block

from dw_dagster.context.models import ContextFile
from dw_dagster.notifications.kit import (
    SECTION_TEXT_LIMIT,
    SlackMessage,
    cap_blocks,
    context_line,
    fallback,
    header,
    section,
)
from dw_dagster.notifications.links import DagsterLinks, dagster_buttons, dagster_ui_url
from dw_dagster.notifications.owners import owners_text
from dw_dagster.notifications.routing import Recipients, asset_label, flagged_assets
from dw_dagster.notifications.text import escape, fit_items, fmt_change, fmt_count, lower_first, more_line
from dw_dagster.notifications.wording import Wording
from dw_dagster.records.incidents import BlastRadius, Incident

DEFAULT_MAX_ITEMS = 100
LIST_HINT = "(full list in Dagster)"


def hold_note(recipients: Recipients, context: ContextFile | None, wording: Wording) -> str | None:
    """What the incident message says was done about the consumers."""
    consumers = (
        owners_text(recipients.consumer_teams, context) if recipients.consumer_teams else "the consumers"
    )
    action = lower_first(wording.hold_action)
    if recipients.hold == "act":
        return (
            f":octagonal_sign: {consumers} told to {escape(action)} on these {escape(wording.flagged_noun)}."
        )
    if recipients.hold == "propose":
        return f":raising_hand: A hold notice for {consumers} is proposed in this thread: a person decides."
    return None


def _flagged_items_blocks(items: Sequence[str], noun: str, max_items: int | None) -> list[Block]:
    if not items:
        return []
    listed, shown = fit_items([escape(i) for i in items], SECTION_TEXT_LIMIT - 120, max_items)
    which = "all" if shown == len(items) else f"first {fmt_count(shown)}"
    heading = f"*Newly flagged {escape(noun)}* ({which} of {fmt_count(len(items))})"
    blocks: list[Block] = [section(f"{heading}\n```{listed}```")]
    if shown < len(items):
        blocks.append(context_line(more_line(len(items) - shown, escape(noun), LIST_HINT)))
    return blocks


def _hold_body(incident: Incident, blast: BlastRadius, wording: Wording) -> str:
    where = flagged_assets(blast)
    n = fmt_count(len(blast.newly_flagged))
    noun = escape(wording.flagged_noun)
    on = f" on *{escape(asset_label(where[0]))}*" if where else ""
    changed = fmt_change(where[0].change, skip=("newly_flagged", "rows_affected")) if where else ""
    changed = f" ({escape(changed)})" if changed else ""
    # For the people who act on the list: what it means for them, not the statistics that found it (the
    # owners' message and Dagster hold those).
    return (
        f"A data incident ({escape(incident.incident_id)}) put *{n} {noun}*{on} tonight that the data does "
        f"not support{changed}.\n*{escape(wording.hold_action)} on these {noun}* until this thread says the "
        "incident is resolved."
    )


def hold_notice(
    incident: Incident,
    blast: BlastRadius,
    *,
    wording: Wording | None = None,
    max_items: int | None = DEFAULT_MAX_ITEMS,
    standing_approval: str | None = None,
    links: DagsterLinks | None = None,
    run_id: str | None = None,
) -> SlackMessage:
    """Tells a consumers' channel to hold on the newly flagged items; ``run_id`` is the diagnosis run."""
    links = links or DagsterLinks(dagster_ui_url())
    wording = wording or Wording()
    n, noun = fmt_count(len(blast.newly_flagged)), wording.flagged_noun
    blocks: list[Block] = [
        header(f":octagonal_sign: {wording.hold_action} on {n} {noun} · {incident.incident_id}"),
        section(_hold_body(incident, blast, wording)),
        *_flagged_items_blocks(blast.newly_flagged, noun, max_items),
        dagster_buttons(links, incident.incident_id, run_id, "Diagnosis run in Dagster"),
        context_line(
            f"Sent by dw-dagster under a standing approval: {escape(standing_approval)}"
            if standing_approval
            else "Sent by dw-dagster under a standing approval for hold notices while an incident is open.",
            "We will post in this thread when the hold can be lifted.",
        ),
    ]
    first, rest = blast.newly_flagged[:10], len(blast.newly_flagged) - 10
    text = fallback(
        f"{wording.hold_action} on {n} newly flagged {noun} ({incident.incident_id}): the data does not support "
        "them until this incident is resolved.",
        f"{', '.join(first)}{f' and {fmt_count(rest)} more' if rest > 0 else ''}.",
        f"In Dagster: {links.best(incident.incident_id, run_id)}",
    )
    return SlackMessage(text=text, blocks=cap_blocks(blocks))


def proposed_hold_notice(
    incident: Incident,
    blast: BlastRadius,
    *,
    consumer_channels: Sequence[str],
    autonomy: str | None = None,
    wording: Wording | None = None,
    max_items: int | None = DEFAULT_MAX_ITEMS,
    links: DagsterLinks | None = None,
    run_id: str | None = None,
) -> SlackMessage:
    """The hold notice as a proposal to the owners: autonomy does not allow acting, so a person decides."""
    links = links or DagsterLinks(dagster_ui_url())
    wording = wording or Wording()
    to = ", ".join(consumer_channels) or "the consumers"
    action = lower_first(wording.hold_action)
    why = f"Autonomy here is {escape(autonomy)}: " if autonomy else "Autonomy here does not allow acting: "
    quoted = "\n".join(f"> {line}" for line in _hold_body(incident, blast, wording).split("\n"))
    blocks: list[Block] = [
        header(f":raising_hand: Proposed: tell {to} to {action} · {incident.incident_id}"),
        section(
            f"*Not sent.* {why}dw-dagster does not tell {escape(to)} to act without a person. "
            f"If you agree, forward this notice to {escape(to)}:\n{quoted}"
        ),
        *_flagged_items_blocks(blast.newly_flagged, wording.flagged_noun, max_items),
        dagster_buttons(links, incident.incident_id, run_id, "Diagnosis run in Dagster"),
    ]
    text = fallback(
        f"Proposed (not sent): tell {to} to {action} on {fmt_count(len(blast.newly_flagged))} newly flagged"
        f" {wording.flagged_noun} ({incident.incident_id}). A person decides.",
        f"In Dagster: {links.best(incident.incident_id, run_id)}",
    )
    return SlackMessage(text=text, blocks=cap_blocks(blocks))
