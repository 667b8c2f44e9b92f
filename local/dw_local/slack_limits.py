"""Slack's message limits, refused as Slack refuses them: the Slack stand-in checks every message it is asked
to post or update against these rules and answers with Slack's own errors.

Each rule names its public source. Block Kit's limits are those of Slack's Block Kit reference
(https://docs.slack.dev/reference/block-kit/blocks and the page of each block and element) and of slack_sdk's
own validators (``slack_sdk.models.blocks``: ``Block.parse(b).to_dict()`` raises what they refuse), which
every block passes through here as well. A refused message is Slack's
``{"ok": false, "error": "invalid_blocks", "errors": [...], "response_metadata": {"messages": ["[ERROR] ...
[json-pointer:/blocks/0/text/text]"]}}``, the shape Slack answers with (its error names and the
``[ERROR] ... [json-pointer:...]`` lines are listed on https://docs.slack.dev/reference/methods/chat.postMessage
and quoted verbatim in slack_sdk and Bolt issues, e.g. "must be less than 3001 characters
[json-pointer:/blocks/0/text/text]"). Where Slack's documentation is silent on whether it refuses or
repairs (a duplicate ``block_id``), the stand-in takes the stricter reading and refuses.
"""

from __future__ import annotations

import json
import re
from typing import Any

from slack_sdk.errors import SlackObjectFormationError
from slack_sdk.models.blocks import Block

# https://docs.slack.dev/reference/block-kit/blocks: "You can include up to 50 blocks in each message".
MAX_BLOCKS = 50
# chat.postMessage: Slack truncates ``text`` past 40,000 characters
# (https://api.slack.com/changelog/2018-04-truncating-really-long-messages) and names ``msg_too_long``
# among its errors; a truncated message loses what it says, so the stand-in refuses it instead.
MAX_TEXT = 40_000
# The block types a message may carry (Block Kit reference, "Available in surfaces: Messages").
MESSAGE_BLOCKS = {
    "actions", "context", "context_actions", "divider", "file", "header", "image", "markdown", "rich_text",
    "section", "table", "video",
}  # fmt: skip
BLOCK_ID_MAX = 255  # every block: "Maximum length for this field is 255 characters"
SECTION_TEXT_MAX = 3000  # section block: text
SECTION_FIELDS_MAX = 10  # section block: "Maximum number of items is 10"
FIELD_TEXT_MAX = 2000  # section block: "Maximum length for the text in each item is 2000 characters"
HEADER_TEXT_MAX = 150  # header block: plain_text only, 150 characters
CONTEXT_ELEMENTS_MAX = 10  # context block: "Maximum number of items is 10"
ACTIONS_ELEMENTS_MAX = 25  # actions block: "There is a maximum of 25 elements in each action block"
# Button element (https://docs.slack.dev/reference/block-kit/block-elements/button-element).
BUTTON_TEXT_MAX, BUTTON_VALUE_MAX, BUTTON_URL_MAX, ACTION_ID_MAX = 75, 2000, 3000, 255
# Confirmation dialog object: title 100, text 300, confirm and deny 30 characters each.
CONFIRM_MAX = {"title": 100, "text": 300, "confirm": 30, "deny": 30}
# Message metadata (https://docs.slack.dev/messaging/message-metadata): an event_type of letters, digits and
# underscores, and an event_payload object.
EVENT_TYPE = re.compile(r"^[A-Za-z0-9_]+$")


class Refusal(Exception):
    """What Slack answers instead of posting: its error name and, for blocks, its ``[ERROR]`` lines."""

    def __init__(self, error: str, messages: list[str] | None = None):
        super().__init__(error)
        self.error = error
        self.messages = messages or []

    def answer(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": False, "error": self.error}
        if self.messages:
            out["errors"] = [m.removeprefix("[ERROR] ") for m in self.messages]
            out["response_metadata"] = {"messages": self.messages}
        return out


def _json_argument(raw: Any, error: str) -> Any:
    """An argument that holds JSON: as sent in a JSON body, or (form-encoded clients) a string of it."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            raise Refusal(error) from None
    return raw


def parse_blocks(raw: Any) -> list[dict[str, Any]] | None:
    """``blocks``: a JSON array of objects."""
    if raw is None or raw == "":
        return None
    blocks = _json_argument(raw, "invalid_blocks_format")
    if not isinstance(blocks, list) or not all(isinstance(b, dict) for b in blocks):
        raise Refusal("invalid_blocks_format")
    return blocks


def parse_metadata(raw: Any) -> dict[str, Any] | None:
    """``metadata``: an object with an ``event_type`` and an ``event_payload`` object."""
    if raw is None or raw == "":
        return None
    metadata = _json_argument(raw, "invalid_metadata_format")
    if not (
        isinstance(metadata, dict)
        and isinstance(metadata.get("event_type"), str)
        and EVENT_TYPE.match(metadata["event_type"])
        and isinstance(metadata.get("event_payload", {}), dict)
    ):
        raise Refusal("invalid_metadata_format")
    return metadata


def check_message(text: str | None, blocks: list[dict[str, Any]] | None) -> None:
    """Raises :class:`Refusal` for what Slack would refuse to post (or to update a message to)."""
    if text is not None and len(text) > MAX_TEXT:
        raise Refusal("msg_too_long")
    if blocks is None:
        return
    problems: list[str] = []
    if len(blocks) > MAX_BLOCKS:
        problems.append(f"[ERROR] no more than {MAX_BLOCKS} items allowed [json-pointer:/blocks]")
    seen_block_ids: set[str] = set()
    for i, block in enumerate(blocks):
        where = f"/blocks/{i}"
        problems += _check_block(block, where)
        block_id = block.get("block_id")
        if block_id is not None:
            # "block_id should be unique for each message and each iteration of a message" (Block Kit).
            if block_id in seen_block_ids:
                problems.append(f"[ERROR] duplicate block_id: {block_id} [json-pointer:{where}/block_id]")
            seen_block_ids.add(block_id)
    if problems:
        raise Refusal("invalid_blocks", problems)


def _too_long(value: Any, limit: int, where: str) -> list[str]:
    if isinstance(value, str) and len(value) > limit:
        return [f"[ERROR] must be less than {limit + 1} characters [json-pointer:{where}]"]
    return []


def _text_object(obj: Any, where: str, limit: int, plain_only: bool = False) -> list[str]:
    if not isinstance(obj, dict) or obj.get("type") not in ("plain_text", "mrkdwn"):
        return [f"[ERROR] must be a text object of type plain_text or mrkdwn [json-pointer:{where}]"]
    if plain_only and obj["type"] != "plain_text":
        return [f"[ERROR] must be a plain_text text object [json-pointer:{where}/type]"]
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        return [f"[ERROR] must be more than 0 characters [json-pointer:{where}/text]"]
    return _too_long(text, limit, f"{where}/text")


def _count(items: list[Any], least: int, most: int, where: str) -> list[str]:
    if len(items) < least:
        return [f"[ERROR] must provide at least {least} item [json-pointer:{where}]"]
    if len(items) > most:
        return [f"[ERROR] no more than {most} items allowed [json-pointer:{where}]"]
    return []


def _check_block(block: dict[str, Any], where: str) -> list[str]:
    kind = block.get("type")
    if kind not in MESSAGE_BLOCKS:
        return [f"[ERROR] unsupported type: {kind} [json-pointer:{where}/type]"]
    problems = _too_long(block.get("block_id"), BLOCK_ID_MAX, f"{where}/block_id")
    if kind == "section":
        if block.get("text") is None and not block.get("fields"):
            problems.append(f"[ERROR] must define either `text` or `fields` [json-pointer:{where}]")
        if block.get("text") is not None:
            problems += _text_object(block["text"], f"{where}/text", SECTION_TEXT_MAX)
        fields = block.get("fields") or []
        problems += _count(fields, 0, SECTION_FIELDS_MAX, f"{where}/fields")
        for j, f in enumerate(fields):
            problems += _text_object(f, f"{where}/fields/{j}", FIELD_TEXT_MAX)
        if isinstance(block.get("accessory"), dict):
            problems += _check_element(block["accessory"], f"{where}/accessory")
    elif kind == "header":
        problems += _text_object(block.get("text"), f"{where}/text", HEADER_TEXT_MAX, plain_only=True)
    elif kind == "context":
        problems += _count(block.get("elements") or [], 1, CONTEXT_ELEMENTS_MAX, f"{where}/elements")
    elif kind == "actions":
        elements = block.get("elements") or []
        problems += _count(elements, 1, ACTIONS_ELEMENTS_MAX, f"{where}/elements")
        action_ids: set[str] = set()
        for j, element in enumerate(elements):
            problems += _check_element(element, f"{where}/elements/{j}")
            # Button element: action_id "Should be unique among all other action_ids in the containing block".
            action_id = element.get("action_id") if isinstance(element, dict) else None
            if action_id is not None:
                if action_id in action_ids:
                    problems.append(
                        f"[ERROR] duplicate action_id: {action_id} [json-pointer:{where}/elements/{j}/action_id]"
                    )
                action_ids.add(action_id)
    if not problems:
        # slack_sdk's own validators (what slack_sdk refuses before it sends) on everything else.
        try:
            Block.parse(block).to_dict()  # type: ignore[union-attr]
        except (SlackObjectFormationError, AttributeError, TypeError, KeyError) as e:
            problems.append(f"[ERROR] {e} [json-pointer:{where}]")
    return problems


def _check_element(element: Any, where: str) -> list[str]:
    if not isinstance(element, dict):
        return [f"[ERROR] must be an object [json-pointer:{where}]"]
    if element.get("type") != "button":
        return []
    problems = _text_object(element.get("text"), f"{where}/text", BUTTON_TEXT_MAX, plain_only=True)
    problems += _too_long(element.get("action_id"), ACTION_ID_MAX, f"{where}/action_id")
    problems += _too_long(element.get("value"), BUTTON_VALUE_MAX, f"{where}/value")
    problems += _too_long(element.get("url"), BUTTON_URL_MAX, f"{where}/url")
    confirm = element.get("confirm")
    if isinstance(confirm, dict):
        for name, limit in CONFIRM_MAX.items():
            problems += _text_object(
                confirm.get(name), f"{where}/confirm/{name}", limit, plain_only=name != "text"
            )
    return problems
