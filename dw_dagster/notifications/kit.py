"""Block Kit within Slack's limits: the message type, the blocks every message is made of, and the split of
a long message across several (never cut off).

Limits (https://api.slack.com/reference/block-kit/blocks): 3,000 characters per section text, 2,000 per
field, 10 fields per section, 150 characters per header, 10 context elements, 50 blocks per message.
slack_sdk validates every block again in :meth:`SlackMessage.payload`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.models.blocks import (
    Block,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from dw_dagster.notifications.text import escape, fmt_count, truncate

MAX_BLOCKS = 50
SECTION_TEXT_LIMIT = 3000
FIELD_TEXT_LIMIT = 2000
MAX_FIELDS = 10
HEADER_TEXT_LIMIT = 150
MAX_CONTEXT_ELEMENTS = 10
CONTEXT_TEXT_LIMIT = 2000
# Slack truncates ``text`` past 40,000 characters; a fallback is a summary, kept far shorter.
FALLBACK_TEXT_LIMIT = 3000
# What one message of a split carries at most: about a screen a person reads in one go.
MESSAGE_TEXT_BUDGET = 12000


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


def mrkdwn(text: str) -> MarkdownTextObject:
    return MarkdownTextObject(text=text)


def section(text: str) -> SectionBlock:
    return SectionBlock(text=mrkdwn(truncate(text, SECTION_TEXT_LIMIT)))


def header(text: str) -> HeaderBlock:
    return HeaderBlock(text=PlainTextObject(text=truncate(text, HEADER_TEXT_LIMIT), emoji=True))


def divider() -> DividerBlock:
    return DividerBlock()


def context_line(*texts: str) -> ContextBlock:
    elements = [mrkdwn(truncate(t, CONTEXT_TEXT_LIMIT)) for t in texts if t][:MAX_CONTEXT_ELEMENTS]
    return ContextBlock(elements=elements)


def field_text(name: str, value: str) -> MarkdownTextObject:
    """A section field: the name in bold over the value (both already readable, escaped here)."""
    return mrkdwn(truncate(f"*{escape(name)}*\n{escape(value)}", FIELD_TEXT_LIMIT))


def fields_sections(title: str, pairs: Sequence[tuple[str, str]]) -> list[SectionBlock]:
    """``pairs`` as fields under ``title``, ten a section (Slack's limit), as many sections as it takes."""
    out = []
    for i in range(0, len(pairs), MAX_FIELDS):
        fields = [field_text(n, v) for n, v in pairs[i : i + MAX_FIELDS]]
        out.append(SectionBlock(text=mrkdwn(title if i == 0 else f"{title} (continued)"), fields=fields))
    return out


def fallback(*parts: str) -> str:
    """The plain-text ``text`` Slack shows in notifications and where blocks cannot render (escaped: Slack
    reads it as mrkdwn too)."""
    return truncate(escape(" ".join(p for p in parts if p)), FALLBACK_TEXT_LIMIT)


def cap_blocks(blocks: list[Block], limit: int = MAX_BLOCKS, note: str = "") -> list[Block]:
    """At most ``limit`` blocks; when cut, the last one says how many were left out."""
    if len(blocks) <= limit:
        return blocks
    kept = blocks[: limit - 1]
    left = len(blocks) - len(kept)
    return [*kept, context_line(f"_… {left} more blocks not shown.{(' ' + note) if note else ''}_")]


def chunk_lines(lines: Sequence[str], room: int) -> list[str]:
    """``lines`` joined into chunks of at most ``room`` characters, split only at line ends (a line longer
    than ``room`` alone is split where it must be). Nothing is dropped."""
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for line in lines:
        while len(line) > room:
            if current:
                chunks.append("\n".join(current))
                current, size = [], 0
            chunks.append(line[:room])
            line = line[room:]
        if current and size + len(line) + 1 > room:
            chunks.append("\n".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line) + 1
    if current or not chunks:
        chunks.append("\n".join(current))
    return chunks


def line_sections(heading: str, lines: Sequence[str]) -> list[SectionBlock]:
    """``heading`` (mrkdwn) over ``lines`` (mrkdwn, escaped by the caller), in as many sections as it takes."""
    if not lines:
        return [section(heading)]
    chunks = chunk_lines(lines, SECTION_TEXT_LIMIT - len(heading) - 1)
    return [section(f"{heading}\n{c}" if i == 0 and heading else c) for i, c in enumerate(chunks)]


def code_sections(heading: str, body: str) -> list[SectionBlock]:
    """``body`` (plain text, escaped here) in code blocks, in as many sections as it takes; ``heading``
    (mrkdwn) opens the first."""
    fence = "```"
    room = SECTION_TEXT_LIMIT - 2 * len(fence) - 2 - len(heading) - 1
    chunks = chunk_lines(escape(body.rstrip("\n")).split("\n"), room)
    blocks = []
    for i, chunk in enumerate(chunks):
        text = f"{fence}\n{chunk}\n{fence}"
        blocks.append(section(f"{heading}\n{text}" if i == 0 and heading else text))
    return blocks


def _size(block: Block) -> int:
    d = block.to_dict()
    texts = [d.get("text", {}).get("text", "")] if isinstance(d.get("text"), dict) else []
    texts += [f.get("text", "") for f in d.get("fields", [])]
    texts += [e.get("text", "") for e in d.get("elements", []) if isinstance(e, dict)]
    return sum(len(t) for t in texts)


def split_blocks(
    body: Sequence[Block],
    *,
    first_head: Sequence[Block] = (),
    tail: Sequence[Block] = (),
    continued: str = "continued",
    budget: int = MESSAGE_TEXT_BUDGET,
) -> list[list[Block]]:
    """Packs ``body`` into messages within Slack's 50 blocks and ``budget`` characters each, in order.

    ``first_head`` opens the first message, ``tail`` closes the last; every later message opens with a
    context line saying it continues (``continued``, then "part i of n"). Nothing is dropped.
    """
    reserve_tail = len(tail)
    parts: list[list[Block]] = [list(first_head)]
    sizes = [sum(_size(b) for b in first_head)]
    for block in body:
        size = _size(block)
        limit = MAX_BLOCKS - 1 - reserve_tail  # room for the "continued" line and the tail
        if parts[-1] and (len(parts[-1]) >= limit or sizes[-1] + size > budget):
            parts.append([])
            sizes.append(0)
        parts[-1].append(block)
        sizes[-1] += size
    if len(parts[-1]) + len(tail) > MAX_BLOCKS - 1:
        parts.append([])
    parts[-1].extend(tail)
    n = len(parts)
    if n == 1:
        return parts
    for i, part in enumerate(parts):
        note = f"_{escape(continued)} · part {fmt_count(i + 1)} of {fmt_count(n)}_"
        part.insert(0 if i else len(first_head), context_line(note))
    return parts
