"""The incident's Slack messages, built with slack_sdk's Block Kit classes.

Every builder returns a :class:`SlackMessage`: the blocks and a plain-text ``text`` fallback (what
notifications, screen readers and clients without Block Kit show). The builders respect Slack's limits
by construction and truncate *visibly* ("… and 1,250 more keys"): 3,000 characters per section text,
2,000 per field, 10 fields per section, 150 characters per header, 10 context elements, 50 blocks per
message. slack_sdk validates every block again in :meth:`SlackMessage.payload`.

Text that comes from data (asset names, SQL, SKU ids) is escaped for mrkdwn (``&``, ``<``, ``>``), so a
``<>`` in a test query cannot turn into a broken link.

Conventions read from the diagnosis models:

- ``Diagnosis.evidence`` keys ending in ``_pct`` are percentages (``-1.8`` renders ``-1.8%``);
  integers render with thousands separators (``41,800``).
- ``AffectedAsset.change`` pairs ``<what>_before`` / ``<what>_after`` render as ``rows 31 → 195``; a
  ``newly_flagged`` count marks the asset that holds the newly flagged items (routing sends the hold
  notice to its owners).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from dw_dagster.context.models import ContextFile
from dw_dagster.incidents.models import AffectedAsset, BlastRadius, Diagnosis, Incident, JoinEffect, KeyGap

# Slack's Block Kit limits (https://api.slack.com/reference/block-kit/blocks).
MAX_BLOCKS = 50
SECTION_TEXT_LIMIT = 3000
FIELD_TEXT_LIMIT = 2000
MAX_FIELDS = 10
HEADER_TEXT_LIMIT = 150
MAX_CONTEXT_ELEMENTS = 10
CONTEXT_TEXT_LIMIT = 2000
BUTTON_TEXT_LIMIT = 75
# Slack truncates ``text`` past 40,000 characters; a fallback is a summary, kept far shorter.
FALLBACK_TEXT_LIMIT = 3000
# Affected assets shown one section each; the rest are counted in a context line.
MAX_ASSET_SECTIONS = 20
DEFAULT_MAX_ITEMS = 100

DEFAULT_DAGSTER_UI_URL = "http://localhost:3000"
INCIDENTS_ASSET_PATH = "dw/incidents"


def dagster_ui_url(env: Mapping[str, str] | None = None) -> str:
    """The Dagster UI's base URL for links: ``DAGSTER_UI_URL``, else the local ``dagster dev`` default."""
    env = os.environ if env is None else env
    return (env.get("DAGSTER_UI_URL") or DEFAULT_DAGSTER_UI_URL).rstrip("/")


@dataclass(frozen=True)
class DagsterLinks:
    """Links into the Dagster UI: the incidents asset and, when known, the run that diagnosed it."""

    base_url: str = DEFAULT_DAGSTER_UI_URL

    def incident(self, incident_id: str) -> str:
        # The incidents asset's page: each materialization is one incident, tagged ``dw/incident_id``.
        return f"{self.base_url.rstrip('/')}/assets/{INCIDENTS_ASSET_PATH}"

    def run(self, run_id: str) -> str:
        return f"{self.base_url.rstrip('/')}/runs/{quote(run_id)}"


@dataclass
class SlackMessage:
    """One Slack message: Block Kit blocks plus the plain-text fallback Slack requires alongside them."""

    text: str
    blocks: list[Block] = field(default_factory=list)

    def payload(self) -> dict[str, Any]:
        """``chat.postMessage`` arguments; ``to_dict`` validates every block against Slack's limits."""
        if len(self.blocks) > MAX_BLOCKS:
            raise ValueError(f"{len(self.blocks)} blocks: Slack accepts at most {MAX_BLOCKS}")
        return {"text": self.text, "blocks": [b.to_dict() for b in self.blocks]}


# -- text helpers --------------------------------------------------------------------------------


def escape(text: Any) -> str:
    """Escapes the three characters mrkdwn treats as control characters."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def truncate(text: str, limit: int, marker: str = "…") -> str:
    return text if len(text) <= limit else text[: max(0, limit - len(marker))] + marker


def fmt_count(n: int) -> str:
    return f"{n:,}"


def fmt_value(key: str, value: Any) -> str:
    """``-1.8`` under ``*_pct`` -> ``-1.8%``; ``41800`` -> ``41,800``; ``0.25`` -> ``0.25``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if key.lower().endswith("_pct"):
        # A change carries its sign (+0.2%); a level or a bound does not (0.3%).
        k = key.lower()
        bound = any(w in k for w in ("baseline", "max", "min", "threshold"))
        signed = ("change" in k or "delta" in k) and not bound
        digits = 1 if abs(value) >= 0.05 or value == 0 else 2
        return f"{value:{'+' if signed else ''},.{digits}f}%"
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.2f}".rstrip("0").rstrip(".")


_WORDS = {
    "ebs": "EBS", "sku": "SKU", "skus": "SKUs", "id": "ID", "onhand": "on-hand", "dc": "DC", "sql": "SQL",
}  # fmt: skip


def label(key: str) -> str:
    """``network_onhand_change_pct`` -> ``Network on-hand change``."""
    words = [w for w in key.split("_") if w and w.lower() != "pct"]
    out = [_WORDS.get(w.lower(), w.lower()) for w in words]
    if out and out[0] == out[0].lower():
        out[0] = out[0][:1].upper() + out[0][1:]
    return " ".join(out) or key


def fmt_change(change: Mapping[str, Any], skip: Sequence[str] = ()) -> str:
    """What changed, in words. Pairs read as before → after, nested totals by name:

    ``{"reorder_candidates": {"before": 31, "after": 195, "newly_flagged": 164}, "rows_affected": 164}``
    -> ``reorder candidates 31 → 195 (newly flagged 164) · rows affected 164``;
    ``{"rows_before": 31, "rows_after": 195}`` -> ``rows 31 → 195``.
    """
    parts: list[str] = []
    done: set[str] = set(skip)
    for key in change:
        if key in done:
            continue
        value = change[key]
        if isinstance(value, Mapping):
            if "before" in value and "after" in value:
                pair = f"{fmt_value(key, value['before'])} → {fmt_value(key, value['after'])}"
                rest = fmt_change(value, skip=("before", "after", *skip))
                parts.append(f"{label(key).lower()} {pair}" + (f" ({rest})" if rest else ""))
            else:
                parts.append(f"{label(key).lower()}: {fmt_change(value, skip=skip)}")
            done.add(key)
        elif key.endswith("_before") and f"{key[:-7]}_after" in change:
            stem = key[:-7]
            after = f"{stem}_after"
            before, now = fmt_value(stem, change[key]), fmt_value(stem, change[after])
            parts.append(f"{label(stem).lower()} {before} → {now}")
            done.update({key, after})
        elif key.endswith("_after") and f"{key[:-6]}_before" in change:
            continue
        elif key == "before" and "after" in change:
            parts.append(f"{fmt_value(key, change['before'])} → {fmt_value(key, change['after'])}")
            done.update({"before", "after"})
        else:
            parts.append(f"{label(key).lower()} {fmt_value(key, change[key])}")
            done.add(key)
    return " · ".join(parts)


def fit_lines(heading: str, lines: Sequence[str], limit: int, noun: str, more_hint: str = "") -> str:
    """``heading`` then as many ``lines`` as fit in ``limit`` characters, then "… and N more <noun>"."""
    text = heading
    for i, line in enumerate(lines):
        rest = len(lines) - i - 1
        candidate = f"{text}\n{line}" if text else line
        # Keep room for the overflow line as long as more lines may follow.
        reserve = len(_more(len(lines), noun, more_hint)) + 1 if rest else 0
        if len(candidate) + reserve > limit:
            more = _more(len(lines) - i, noun, more_hint)
            return truncate(f"{text}\n{more}" if text else more, limit)
        text = candidate
    return text


def _more(n: int, noun: str, hint: str) -> str:
    return f"_… and {fmt_count(n)} more {noun}{(' ' + hint) if hint else ''}_"


def fit_items(items: Sequence[str], limit: int, max_items: int | None) -> tuple[str, int]:
    """A comma-separated run of ``items`` within ``limit`` characters and ``max_items``; returns it and
    how many items it holds."""
    shown: list[str] = []
    size = 0
    for item in items:
        if max_items is not None and len(shown) >= max_items:
            break
        add = len(item) + (2 if shown else 0)
        if size + add > limit:
            break
        shown.append(item)
        size += add
    return ", ".join(shown), len(shown)


def mrkdwn(text: str) -> MarkdownTextObject:
    return MarkdownTextObject(text=text)


def section(text: str) -> SectionBlock:
    return SectionBlock(text=mrkdwn(truncate(text, SECTION_TEXT_LIMIT)))


def header(text: str) -> HeaderBlock:
    return HeaderBlock(text=PlainTextObject(text=truncate(text, HEADER_TEXT_LIMIT), emoji=True))


def context_line(*texts: str) -> ContextBlock:
    elements = [mrkdwn(truncate(t, CONTEXT_TEXT_LIMIT)) for t in texts if t][:MAX_CONTEXT_ELEMENTS]
    return ContextBlock(elements=elements)


def cap_blocks(blocks: list[Block], limit: int = MAX_BLOCKS, note: str = "") -> list[Block]:
    """At most ``limit`` blocks; when cut, the last one says how many were left out."""
    if len(blocks) <= limit:
        return blocks
    kept = blocks[: limit - 1]
    left = len(blocks) - len(kept)
    return [*kept, context_line(f"_… {left} more blocks not shown.{(' ' + note) if note else ''}_")]


# -- owners --------------------------------------------------------------------------------------


def owner_team(owner: str, context: ContextFile | None) -> str | None:
    """The context file's team id for an owner as assets carry it: ``team:planning-ops`` (Dagster's
    owner form), ``planning-ops``, or a member's email."""
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
    """``Inventory analytics (#inventory-analytics)``, with member mentions when ``mention``."""
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


def _owners(teams: Sequence[str], context: ContextFile | None, mention: bool = False) -> str:
    return ", ".join(team_label(t, context, mention) for t in teams) or "no owner on record"


# -- pieces of the incident message --------------------------------------------------------------

SEVERITY_EMOJI = {"ERROR": ":rotating_light:", "WARN": ":warning:"}


def _key_line(k: KeyGap) -> str:
    bits = [f"{fmt_value('', k.units)} units"]
    if k.distinct_items is not None:
        bits.append(f"over {fmt_count(k.distinct_items)} SKUs")
    bits.append(f"{fmt_count(k.rows)} rows")
    if k.new_in_source_since:
        bits.append(f"new in the source since {k.new_in_source_since.isoformat()}")
    return f"• `{escape(k.column)} = {escape(k.value)}`: {', '.join(bits)}"


def _join_line(j: JoinEffect) -> str:
    on = " AND ".join(j.on) or "?"
    effect = [f"drops {fmt_count(j.dropped_rows)} rows ({fmt_value('', j.dropped_units)} units)"]
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


def _evidence_fields(evidence: Mapping[str, Any]) -> tuple[list[MarkdownTextObject], list[str]]:
    items = [(label(k), fmt_value(k, v)) for k, v in evidence.items()]
    fields = [field_text(name, val) for name, val in items[:MAX_FIELDS]]
    overflow = [f"• *{escape(name)}*: {escape(val)}" for name, val in items[MAX_FIELDS:]]
    return fields, overflow


def field_text(name: str, value: str) -> MarkdownTextObject:
    return mrkdwn(truncate(f"*{escape(name)}*\n{escape(value)}", FIELD_TEXT_LIMIT))


def _asset_section(a: AffectedAsset, context: ContextFile | None) -> SectionBlock:
    lines = [f"*{escape(a.name)}* `{escape(a.asset_key)}` · {escape(a.kind)}"]
    lines.append(f"Owners: {_owners(a.owners, context)}")
    if a.change:
        lines.append(f"Changed: {escape(fmt_change(a.change))}")
    if a.next_read:
        lines.append(f"Next read: *{escape(a.next_read)}*")
    return section("\n".join(lines))


def _test_query_section(sql: str, hint: str) -> SectionBlock:
    head = "*Test query* (returns the rows at fault)\n```\n"
    tail = "\n```"
    body = escape(sql.strip())
    room = SECTION_TEXT_LIMIT - len(head) - len(tail)
    if len(body) > room:
        note = f"\n-- … truncated ({fmt_count(len(body))} characters in all); {hint}"
        body = body[: room - len(note)] + note
    return SectionBlock(text=mrkdwn(head + body + tail))


def _dagster_actions(links: DagsterLinks, incident_id: str, run_id: str | None) -> ActionsBlock:
    buttons = [
        ButtonElement(
            text=PlainTextObject(text="Open incident in Dagster"),
            url=links.incident(incident_id),
            action_id="dw_open_incident",
            style="primary",
        )
    ]
    if run_id:
        buttons.append(
            ButtonElement(
                text=PlainTextObject(text="Diagnosis run"), url=links.run(run_id), action_id="dw_open_run"
            )
        )
    return ActionsBlock(elements=buttons)


def flagged_count(change: Mapping[str, Any]) -> int | None:
    """The ``newly_flagged`` count in an asset's change, at the top level or under a total's name."""
    if isinstance(change.get("newly_flagged"), int | float):
        return int(change["newly_flagged"])
    for value in change.values():
        if isinstance(value, Mapping) and isinstance(value.get("newly_flagged"), int | float):
            return int(value["newly_flagged"])
    return None


def flagged_assets(blast: BlastRadius) -> list[AffectedAsset]:
    """The affected assets that hold the newly flagged items (e.g. the reorder candidates, 31 -> 195)."""
    return [a for a in blast.assets if flagged_count(a.change)]


def _flagged_asset(blast: BlastRadius) -> AffectedAsset | None:
    found = flagged_assets(blast)
    return found[0] if found else None


# -- messages ------------------------------------------------------------------------------------


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
) -> SlackMessage:
    """The incident for the owners on the path: cause, evidence, keys, joins, blast radius, test query, link.

    ``refined`` renders the same content as an update ("Diagnosis refined"), for a reply in the thread.
    ``hold_note`` says what was done about the consumers (told to hold, or a proposal awaiting a person).
    """
    links = links or DagsterLinks(dagster_ui_url())
    hint = "full detail in Dagster"
    emoji = SEVERITY_EMOJI.get(incident.severity.upper(), ":warning:")
    title = incident.title or diagnosis.cause
    severity = incident.severity.upper()
    prefix = ":arrows_counterclockwise: Diagnosis refined" if refined else f"{emoji} {severity}"
    blocks: list[Block] = [header(f"{prefix} · {incident.incident_id} · {title}")]

    cause = [f"*Cause* ({escape(diagnosis.classification.value.replace('_', ' '))})", escape(diagnosis.cause)]
    if diagnosis.upstream_change:
        cause.append(f"*Upstream change:* {escape(diagnosis.upstream_change)}")
    blocks.append(section("\n".join(cause)))

    if diagnosis.evidence:
        fields, overflow = _evidence_fields(diagnosis.evidence)
        blocks.append(SectionBlock(text=mrkdwn("*Evidence*"), fields=fields))
        if overflow:
            blocks.append(section(fit_lines("", overflow, SECTION_TEXT_LIMIT, "evidence items", hint)))
    if diagnosis.keys:
        lines = [_key_line(k) for k in diagnosis.keys]
        blocks.append(section(fit_lines("*Keys holding the gap*", lines, SECTION_TEXT_LIMIT, "keys", hint)))
    if diagnosis.joins:
        lines = [_join_line(j) for j in diagnosis.joins]
        blocks.append(section(fit_lines("*Joins on the path*", lines, SECTION_TEXT_LIMIT, "joins", hint)))
    if diagnosis.path:
        path = " → ".join(f"`{escape(p)}`" for p in diagnosis.path)
        blocks.append(context_line(f"Path: {truncate(path, CONTEXT_TEXT_LIMIT - 6)}"))

    blocks.append(DividerBlock())
    summary = escape(fmt_change(blast.summary))
    radius = f"*Blast radius*: {fmt_count(len(blast.assets))} affected assets"
    blocks.append(section(radius + (f" · {summary}" if summary else "")))
    for a in blast.assets[:MAX_ASSET_SECTIONS]:
        blocks.append(_asset_section(a, context))
    if len(blast.assets) > MAX_ASSET_SECTIONS:
        blocks.append(context_line(_more(len(blast.assets) - MAX_ASSET_SECTIONS, "affected assets", hint)))
    if blast.newly_flagged or hold_note:
        where = _flagged_asset(blast)
        flagged = f"*{fmt_count(len(blast.newly_flagged))} newly flagged SKUs*"
        if where:
            flagged += f" on {escape(where.name)}"
        blocks.append(section(flagged + (f"\n{hold_note}" if hold_note else "")))

    if diagnosis.test_query:
        blocks.append(DividerBlock())
        blocks.append(_test_query_section(diagnosis.test_query, hint))
    # The link and the owners come last: the cap below never cuts them.
    tail: list[Block] = [
        _dagster_actions(links, incident.incident_id, run_id),
        context_line(
            f"Owners on the path: {_owners(diagnosis.owners, context, mention=True)}",
            f"Business date {incident.business_date} · opened {incident.opened_at:%Y-%m-%d %H:%M} UTC",
        ),
    ]
    blocks = cap_blocks(blocks, MAX_BLOCKS - len(tail), hint) + tail

    evidence = list(diagnosis.evidence.items())
    text = _fallback(
        f"{'Diagnosis refined' if refined else severity} {incident.incident_id}: {title}.",
        f"Cause: {diagnosis.cause}" if diagnosis.cause else "",
        ("Evidence: " + "; ".join(f"{label(k)} {fmt_value(k, v)}" for k, v in evidence[:6]) + ".")
        if evidence
        else "",
        f"Blast radius: {len(blast.assets)} assets"
        + (f", {len(blast.newly_flagged):,} newly flagged SKUs" if blast.newly_flagged else "")
        + ".",
        f"Details: {links.incident(incident.incident_id)}",
    )
    return SlackMessage(text=text, blocks=blocks)


def _fallback(*parts: str) -> str:
    return truncate(" ".join(p for p in parts if p), FALLBACK_TEXT_LIMIT)


def _flagged_items_blocks(items: Sequence[str], noun: str, max_items: int | None, hint: str) -> list[Block]:
    if not items:
        return []
    listed, shown = fit_items([escape(i) for i in items], SECTION_TEXT_LIMIT - 120, max_items)
    which = "all" if shown == len(items) else f"first {fmt_count(shown)}"
    heading = f"*Newly flagged {noun}* ({which} of {fmt_count(len(items))})"
    blocks: list[Block] = [section(f"{heading}\n```{listed}```")]
    if shown < len(items):
        blocks.append(context_line(_more(len(items) - shown, noun, hint)))
    return blocks


def hold_notice(
    incident: Incident,
    blast: BlastRadius,
    *,
    action: str = "Hold expedite orders",
    item_noun: str = "SKUs",
    max_items: int | None = DEFAULT_MAX_ITEMS,
    standing_approval: str | None = None,
    links: DagsterLinks | None = None,
) -> SlackMessage:
    """Tells a consumers' channel to hold on the newly flagged items while the incident is open.

    Sent at once only where autonomy allows acting under a standing approval (``standing_approval``
    names it in the footer); elsewhere use :func:`proposed_hold_notice`.
    """
    links = links or DagsterLinks(dagster_ui_url())
    n = len(blast.newly_flagged)
    blocks: list[Block] = [
        header(f":octagonal_sign: {action} on {n:,} {item_noun} · {incident.incident_id}"),
    ]
    blocks.append(section(_hold_body(incident, blast, action, item_noun)))
    blocks += _flagged_items_blocks(blast.newly_flagged, item_noun, max_items, "(full list in Dagster)")
    blocks.append(_dagster_actions(links, incident.incident_id, None))
    blocks.append(
        context_line(
            f"Sent by dw-dagster under a standing approval: {escape(standing_approval)}"
            if standing_approval
            else "Sent by dw-dagster under a standing approval for hold notices while an incident is open.",
            "We will post in this thread when the hold can be lifted.",
        )
    )
    text = _fallback(
        f"{action} on {n:,} newly flagged {item_noun} ({incident.incident_id}): {incident.title}.",
        f"First {item_noun}: {', '.join(blast.newly_flagged[:10])}{' …' if n > 10 else ''}.",
        f"Full list: {links.incident(incident.incident_id)}",
    )
    return SlackMessage(text=text, blocks=cap_blocks(blocks))


def _hold_body(incident: Incident, blast: BlastRadius, action: str, noun: str) -> str:
    where = _flagged_asset(blast)
    n = fmt_count(len(blast.newly_flagged))
    on = f" on *{escape(where.name)}*" if where else ""
    changed = fmt_change(where.change, skip=("newly_flagged", "rows_affected")) if where else ""
    changed = f" ({escape(changed)})" if changed else ""
    return (
        f"A data incident ({escape(incident.title)}) put *{n} {noun}*{on} tonight that the data does not "
        f"support{changed}.\n*{escape(action)} on these {noun}* until this thread says the incident is"
        " resolved."
    )


def proposed_hold_notice(
    incident: Incident,
    blast: BlastRadius,
    *,
    consumer_channels: Sequence[str],
    autonomy: str | None = None,
    action: str = "Hold expedite orders",
    item_noun: str = "SKUs",
    max_items: int | None = DEFAULT_MAX_ITEMS,
    links: DagsterLinks | None = None,
) -> SlackMessage:
    """The hold notice as a proposal to the owners: autonomy does not allow acting, so a person decides."""
    links = links or DagsterLinks(dagster_ui_url())
    n = len(blast.newly_flagged)
    to = ", ".join(consumer_channels) or "the consumers"
    why = f"Autonomy here is {escape(autonomy)}: " if autonomy else "Autonomy here does not allow acting: "
    blocks: list[Block] = [
        header(f":raising_hand: Proposed: tell {to} to {action.lower()} · {incident.incident_id}"),
    ]
    blocks.append(
        section(
            f"*Not sent.* {why}dw-dagster does not tell {escape(to)} to act without a person. "
            f"If you agree, forward this notice to {escape(to)}:\n"
            + "\n".join(f"> {line}" for line in _hold_body(incident, blast, action, item_noun).split("\n"))
        )
    )
    blocks += _flagged_items_blocks(blast.newly_flagged, item_noun, max_items, "(full list in Dagster)")
    blocks.append(_dagster_actions(links, incident.incident_id, None))
    text = _fallback(
        f"Proposed (not sent): tell {to} to {action.lower()} on {n:,} newly flagged {item_noun}"
        f" ({incident.incident_id}). A person decides.",
        f"Details: {links.incident(incident.incident_id)}",
    )
    return SlackMessage(text=text, blocks=cap_blocks(blocks))


def update_message(
    incident: Incident, text: str, *, title: str = "Update", emoji: str = ":memo:"
) -> SlackMessage:
    """A thread reply: what changed since the last message."""
    blocks: list[Block] = [
        section(f"{emoji} *{escape(title)}* · {incident.incident_id}\n{escape(text)}"),
    ]
    return SlackMessage(text=_fallback(f"{title} ({incident.incident_id}): {text}"), blocks=blocks)


def resolution_message(
    incident: Incident,
    text: str,
    *,
    verification: Mapping[str, Any] | None = None,
    links: DagsterLinks | None = None,
) -> SlackMessage:
    """The thread reply that closes the incident, with the verification numbers when given."""
    links = links or DagsterLinks(dagster_ui_url())
    blocks: list[Block] = [
        section(f":white_check_mark: *Resolved* · {incident.incident_id}\n{escape(text)}"),
    ]
    if verification:
        fields = [field_text(label(k), fmt_value(k, v)) for k, v in list(verification.items())[:MAX_FIELDS]]
        blocks.append(SectionBlock(text=mrkdwn("*Verification*"), fields=fields))
    blocks.append(_dagster_actions(links, incident.incident_id, None))
    return SlackMessage(text=_fallback(f"Resolved ({incident.incident_id}): {text}"), blocks=blocks)
