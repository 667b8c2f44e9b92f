"""The incident message for the owners on the path: cause, evidence, keys, joins, blast radius, test query,
and the diagnosis run in Dagster.

Conventions read from the diagnosis models: ``Diagnosis.evidence`` keys ending in ``_pct`` are percentage
points; ``AffectedAsset.change`` pairs read as before → after; a ``newly_flagged`` count marks the asset
that holds the newly flagged items. The items are counted in the pipeline's own words (:class:`Wording`).
"""

from __future__ import annotations

from slack_sdk.models.blocks import Block, SectionBlock

from dw_dagster.context.models import ContextFile
from dw_dagster.notifications.kit import (
    CONTEXT_TEXT_LIMIT,
    MAX_BLOCKS,
    MAX_FIELDS,
    SECTION_TEXT_LIMIT,
    SlackMessage,
    cap_blocks,
    code_sections,
    context_line,
    divider,
    fallback,
    field_text,
    header,
    mrkdwn,
    section,
)
from dw_dagster.notifications.links import DagsterLinks, dagster_buttons, dagster_ui_url
from dw_dagster.notifications.owners import owners_text
from dw_dagster.notifications.routing import asset_label, flagged_assets
from dw_dagster.notifications.text import (
    escape,
    fit_lines,
    fmt_change,
    fmt_count,
    fmt_number,
    fmt_value,
    humanise_names,
    more_line,
    slack_date,
    truncate,
)
from dw_dagster.notifications.wording import Wording
from dw_dagster.records.incidents import AffectedAsset, BlastRadius, Diagnosis, Incident, JoinEffect, KeyGap

# Affected assets shown one section each; the rest are counted in a context line.
MAX_ASSET_SECTIONS = 20
DETAIL_HINT = "(full detail in Dagster)"
SEVERITY_EMOJI = {"ERROR": ":rotating_light:", "WARN": ":warning:"}
# A test query longer than this many sections is cut in the message (the diagnosis run holds it whole).
MAX_QUERY_SECTIONS = 2


def _key_line(k: KeyGap, item_noun: str) -> str:
    bits = [f"{fmt_number(k.units)} units"]
    if k.distinct_items is not None:
        bits.append(f"over {fmt_count(k.distinct_items)} {escape(item_noun)}")
    bits.append(f"{fmt_count(k.rows)} rows")
    if k.new_in_source_since:
        bits.append(f"new in the source since {k.new_in_source_since.isoformat()}")
    return f"• `{escape(k.column)} = {escape(k.value)}`: {', '.join(bits)}"


def _join_line(j: JoinEffect) -> str:
    on = " AND ".join(j.on) or "?"
    effect = [f"drops {fmt_count(j.dropped_rows)} rows ({fmt_number(j.dropped_units)} units)"]
    if j.duplicated_rows:
        effect.append(f"duplicates {fmt_count(j.duplicated_rows)} rows")
    keys = ""
    if j.unmatched:
        shown = ", ".join(f"{escape(k.column)}={escape(k.value)}" for k in j.unmatched[:5])
        extra = f" and {fmt_count(len(j.unmatched) - 5)} more" if len(j.unmatched) > 5 else ""
        keys = f"; unmatched: {shown}{extra}"
    return (
        f"• `{escape(j.asset_key)}`: {escape(j.join_type.upper())} JOIN `{escape(j.right)}`"
        f" ON `{escape(on)}` {' and '.join(effect)}{keys}"
    )


def evidence_blocks(evidence: dict, wording: Wording) -> list[Block]:
    """The evidence as fields (ten, Slack's limit), the rest as lines below them."""
    items = [(wording.evidence_label(k), fmt_value(k, v)) for k, v in evidence.items()]
    blocks: list[Block] = [
        SectionBlock(
            text=mrkdwn("*Evidence*"), fields=[field_text(name, val) for name, val in items[:MAX_FIELDS]]
        )
    ]
    overflow = [f"• *{escape(name)}*: {escape(val)}" for name, val in items[MAX_FIELDS:]]
    if overflow:
        blocks.append(section(fit_lines("", overflow, SECTION_TEXT_LIMIT, "evidence items", DETAIL_HINT)))
    return blocks


def _asset_section(a: AffectedAsset, context: ContextFile | None) -> SectionBlock:
    lines = [f"*{escape(a.name)}* `{escape(a.asset_key)}` · {escape(a.kind)}"]
    lines.append(f"Owners: {owners_text(a.owners, context)}")
    if a.change:
        lines.append(f"Changed: {escape(fmt_change(a.change))}")
    if a.next_read:
        lines.append(f"Next read: *{escape(a.next_read)}*")
    return section("\n".join(lines))


def _test_query_blocks(sql: str) -> list[Block]:
    blocks: list[Block] = list(code_sections("*Test query* (returns the rows at fault)", sql.strip()))
    if len(blocks) > MAX_QUERY_SECTIONS:
        left = len(blocks) - MAX_QUERY_SECTIONS
        blocks = [
            *blocks[:MAX_QUERY_SECTIONS],
            context_line(more_line(left, "parts of the query", DETAIL_HINT)),
        ]
    return blocks


def incident_message(
    incident: Incident,
    diagnosis: Diagnosis,
    blast: BlastRadius,
    *,
    context: ContextFile | None = None,
    links: DagsterLinks | None = None,
    run_id: str | None = None,
    hold_note: str | None = None,
    refined: bool = False,
    wording: Wording | None = None,
) -> SlackMessage:
    """The incident for the owners on the path; ``run_id`` is the diagnosis run it links to.

    ``refined`` renders the same content as an update ("Diagnosis refined"), for a reply in the thread.
    ``hold_note`` says what was done about the consumers (told to hold, or a proposal awaiting a person).
    """
    links = links or DagsterLinks(dagster_ui_url())
    wording = wording or Wording()
    emoji = SEVERITY_EMOJI.get(incident.severity.upper(), ":warning:")
    title = humanise_names(incident.title or diagnosis.cause)
    severity = incident.severity.upper()
    prefix = ":arrows_counterclockwise: Diagnosis refined" if refined else f"{emoji} {severity}"
    blocks: list[Block] = [header(f"{prefix} · {incident.incident_id} · {title}")]

    cause = [
        f"*Cause* ({escape(diagnosis.classification.words)})",
        escape(humanise_names(diagnosis.cause)),
    ]
    if diagnosis.upstream_change:
        cause.append(f"*Upstream change:* {escape(humanise_names(diagnosis.upstream_change))}")
    blocks.append(section("\n".join(cause)))

    if diagnosis.evidence:
        blocks += evidence_blocks(diagnosis.evidence, wording)
    if diagnosis.keys:
        lines = [_key_line(k, wording.item_noun) for k in diagnosis.keys]
        blocks.append(
            section(fit_lines("*Keys holding the gap*", lines, SECTION_TEXT_LIMIT, "keys", DETAIL_HINT))
        )
    if diagnosis.joins:
        lines = [_join_line(j) for j in diagnosis.joins]
        blocks.append(
            section(fit_lines("*Joins on the path*", lines, SECTION_TEXT_LIMIT, "joins", DETAIL_HINT))
        )
    if diagnosis.path:
        path = " → ".join(f"`{escape(p)}`" for p in diagnosis.path)
        blocks.append(context_line(f"Path: {truncate(path, CONTEXT_TEXT_LIMIT - 6)}"))

    blocks.append(divider())
    summary = escape(fmt_change(blast.summary))
    radius = f"*Blast radius*: {fmt_count(len(blast.assets))} affected assets"
    blocks.append(section(radius + (f" · {summary}" if summary else "")))
    for a in blast.assets[:MAX_ASSET_SECTIONS]:
        blocks.append(_asset_section(a, context))
    if len(blast.assets) > MAX_ASSET_SECTIONS:
        left = len(blast.assets) - MAX_ASSET_SECTIONS
        blocks.append(context_line(more_line(left, "affected assets", DETAIL_HINT)))
    if blast.newly_flagged or hold_note:
        where = flagged_assets(blast)
        flagged = f"*{fmt_count(len(blast.newly_flagged))} newly flagged {escape(wording.flagged_noun)}*"
        if where:
            flagged += f" on {escape(asset_label(where[0]))}"
        blocks.append(section(flagged + (f"\n{hold_note}" if hold_note else "")))

    if diagnosis.test_query:
        blocks.append(divider())
        blocks += _test_query_blocks(diagnosis.test_query)
    # The link and the owners come last: the cap below never cuts them.
    tail: list[Block] = [
        dagster_buttons(links, incident.incident_id, run_id, "Diagnosis run in Dagster"),
        context_line(
            f"Owners on the path: {owners_text(diagnosis.owners, context, mention=True)}",
            f"Business date {incident.business_date} · opened {slack_date(incident.opened_at)}",
        ),
    ]
    blocks = cap_blocks(blocks, MAX_BLOCKS - len(tail), DETAIL_HINT) + tail

    evidence = list(diagnosis.evidence.items())
    flagged_text = (
        f", {fmt_count(len(blast.newly_flagged))} newly flagged {wording.flagged_noun}"
        if blast.newly_flagged
        else ""
    )
    text = fallback(
        f"{'Diagnosis refined' if refined else severity} {incident.incident_id}: {title}.",
        f"Cause: {diagnosis.cause}" if diagnosis.cause else "",
        (
            "Evidence: "
            + "; ".join(f"{wording.evidence_label(k)} {fmt_value(k, v)}" for k, v in evidence[:6])
            + "."
        )
        if evidence
        else "",
        f"Blast radius: {fmt_count(len(blast.assets))} assets{flagged_text}.",
        f"In Dagster: {links.best(incident.incident_id, run_id)}",
    )
    return SlackMessage(text=text, blocks=blocks)
