"""The tools' answers: a typed record (the tool's output schema) and the same told as markdown."""

from __future__ import annotations

from typing import Any

from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, Field


class Answer(BaseModel):
    text: str = Field(description="The answer as a person reads it (markdown).")


def answer(record: Answer) -> CallToolResult:
    """The record as structured content, its ``text`` as what the agent shows."""
    return CallToolResult(
        content=[TextContent(type="text", text=record.text)],
        structured_content=record.model_dump(mode="json"),
    )


def table(header: list[str], rows: list[list[Any]]) -> str:
    """A markdown table (pipes inside cells escaped)."""

    def cell(v: Any) -> str:
        return ("-" if v is None or v == "" else str(v)).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
