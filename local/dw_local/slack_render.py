"""What a person sees of the messages the Slack stand-in received: the blocks rendered as text, in threads.

Slack shows the blocks, not the ``text`` fallback (that is for notifications and screen readers), so the
log renders them: headers, sections with their fields, context lines, dividers, buttons; and in mrkdwn the
tokens Slack replaces: dates (``<!date^...>``) in the reader's time zone, links (``<url|label>``),
mentions (``<@U0...>``) and the escaped ``&``, ``<``, ``>``. A message without blocks shows its text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, tzinfo
from typing import Any

_DATE = re.compile(r"<!date\^(\d+)\^([^^|>]*)(?:\^([^|>]*))?\|([^>]*)>")
_LINK = re.compile(r"<((?:https?|mailto):[^|>]+)(?:\|([^>]+))?>")
_USER = re.compile(r"<@([A-Z0-9]+)(?:\|([^>]+))?>")
_CHANNEL = re.compile(r"<#([A-Z0-9]+)(?:\|([^>]+))?>")
_SPECIAL = re.compile(r"<!(here|channel|everyone)>")
# Slack's date tokens, as a reader's client renders them.
_DATE_TOKENS = {
    "{date_num}": "%Y-%m-%d",
    "{date}": "%B %d, %Y",
    "{date_short}": "%b %d, %Y",
    "{date_long}": "%A, %B %d, %Y",
    "{date_pretty}": "%B %d, %Y",
    "{date_short_pretty}": "%b %d, %Y",
    "{date_long_pretty}": "%A, %B %d, %Y",
    "{time}": "%H:%M %Z",
    "{time_secs}": "%H:%M:%S %Z",
}


def render_mrkdwn(text: str, tz: tzinfo | None = None) -> str:
    """mrkdwn as Slack displays it: tokens replaced, entities unescaped (formatting marks kept)."""

    def date(m: re.Match[str]) -> str:
        at = datetime.fromtimestamp(int(m.group(1)), tz).astimezone(tz)
        out = m.group(2)
        for token, fmt in _DATE_TOKENS.items():
            out = out.replace(token, at.strftime(fmt))
        return out

    text = _DATE.sub(date, text)
    text = _LINK.sub(lambda m: f"{m.group(2)} ({m.group(1)})" if m.group(2) else m.group(1), text)
    text = _USER.sub(lambda m: f"@{m.group(2) or m.group(1)}", text)
    text = _CHANNEL.sub(lambda m: f"#{m.group(2) or m.group(1)}", text)
    text = _SPECIAL.sub(lambda m: f"@{m.group(1)}", text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _text(obj: dict[str, Any] | None, tz: tzinfo | None) -> str:
    if not obj:
        return ""
    return render_mrkdwn(obj.get("text", ""), tz) if obj.get("type") == "mrkdwn" else obj.get("text", "")


def render_blocks(blocks: Sequence[dict[str, Any]], tz: tzinfo | None = None) -> str:
    lines: list[str] = []
    for b in blocks:
        kind = b.get("type")
        if kind == "header":
            title = _text(b.get("text"), tz)
            lines += [title, "=" * min(len(title), 80)]
        elif kind == "section":
            if b.get("text"):
                lines.append(_text(b["text"], tz))
            for f in b.get("fields", []):
                name, _, value = _text(f, tz).partition("\n")
                lines.append(f"  {name.strip('*')}: {value}" if value else f"  {name}")
        elif kind == "context":
            lines.append(" · ".join(_text(e, tz) for e in b.get("elements", []) if e.get("type") != "image"))
        elif kind == "divider":
            lines.append("-" * 40)
        elif kind == "actions":
            buttons = []
            for e in b.get("elements", []):
                label = _text(e.get("text"), tz)
                buttons.append(f"[{label} → {e['url']}]" if e.get("url") else f"[{label}]")
            lines.append(" ".join(buttons))
        elif kind == "rich_text" or kind is None:
            continue
        else:
            lines.append(f"({kind} block)")
    return "\n".join(lines)


def render_message(message: dict[str, Any], tz: tzinfo | None = None) -> str:
    """The message as a person reads it: its blocks, else its text."""
    if message.get("blocks"):
        return render_blocks(message["blocks"], tz)
    return render_mrkdwn(message.get("text") or "", tz)


def render_log(messages: Sequence[dict[str, Any]], tz: tzinfo | None = None) -> str:
    """Channel by channel, each root message followed by its thread's replies (indented), in arrival order."""
    roots = [m for m in messages if not m.get("thread_ts")]
    replies: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for m in messages:
        if m.get("thread_ts"):
            replies.setdefault((m["channel"], m["thread_ts"]), []).append(m)
    known = {(m["channel"], m["ts"]) for m in roots}
    # A reply whose root the log does not hold still shows (as its own thread).
    orphans = [k for k in replies if k not in known]
    out: list[str] = []
    channels = list(dict.fromkeys(m["channel"] for m in messages))
    for channel in channels:
        out.append(f"##### {channel}")
        threads = [(m["ts"], m) for m in roots if m["channel"] == channel]
        threads += [(k[1], None) for k in orphans if k[0] == channel]
        for ts, root in sorted(threads, key=lambda t: t[0]):
            # Each message's ts: what `dw-dagster slack click` takes to press one of its buttons.
            if root is not None:
                out += [f"[{_when(root['ts'], tz)}] ts {root['ts']}", render_message(root, tz), ""]
            else:
                out.append(f"(thread {ts}: its first message is not in this log)")
            for reply in replies.get((channel, ts), []):
                body = render_message(reply, tz).replace("\n", "\n    ")
                out += [f"  ↳ [{_when(reply['ts'], tz)}] reply · ts {reply['ts']}", f"    {body}", ""]
    return "\n".join(out)


def _when(ts: str, tz: tzinfo | None) -> str:
    return datetime.fromtimestamp(float(ts), tz).astimezone(tz).strftime("%Y-%m-%d %H:%M:%S %Z")
