"""What every Slack message must hold to, checked on its payload: Slack's limits, and that it reads as a
person writes (no Python repr, no unrounded number, mrkdwn rather than Markdown)."""

from __future__ import annotations

import json
import re

from dw_dagster.notifications.kit import FIELD_TEXT_LIMIT, HEADER_TEXT_LIMIT, MAX_BLOCKS, SECTION_TEXT_LIMIT


def texts(payload: dict) -> str:
    return json.dumps(payload["blocks"], ensure_ascii=False)


def check_limits(payload: dict) -> None:
    blocks = payload["blocks"]
    assert payload["text"], "plain-text fallback always set"
    assert len(blocks) <= MAX_BLOCKS
    for b in blocks:
        if b["type"] == "header":
            assert len(b["text"]["text"]) <= HEADER_TEXT_LIMIT
        if b["type"] == "section":
            if "text" in b:
                assert len(b["text"]["text"]) <= SECTION_TEXT_LIMIT
            assert len(b.get("fields", [])) <= 10
            assert all(len(f["text"]) <= FIELD_TEXT_LIMIT for f in b.get("fields", []))
        if b["type"] == "context":
            assert len(b["elements"]) <= 10


_REPR = re.compile(
    r"\{'|'\}|\[\]|\bNone\b|\bTrue\b|\bFalse\b|datetime\(|Decimal\(|\d\.\d{4,}|\d{5,}\.\d|^#{1,6} |\*\*", re.M
)


def check_reads_like_slack(payload: dict) -> None:
    """No Python repr, no unrounded number, no Markdown heading or ``**``; mrkdwn only."""
    for b in payload["blocks"]:
        for obj in [b.get("text"), *b.get("fields", []), *b.get("elements", [])]:
            if not isinstance(obj, dict) or "text" not in obj:
                continue
            text = obj["text"] if isinstance(obj["text"], str) else obj["text"]["text"]
            # Code blocks show the data as it is (a diff, SQL): only the prose around them is checked.
            prose = re.sub(r"```.*?```", "", text, flags=re.S)
            assert not _REPR.search(prose), (_REPR.search(prose), prose[:400])
    assert not _REPR.search(payload["text"]), payload["text"][:400]
