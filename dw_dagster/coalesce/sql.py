"""Coalesce's ``{{ ref('LOCATION', 'NODE') }}`` templates, as written in join conditions and node tests.

A join condition reads like ``FROM {{ ref('STAGE', 'STG_EVENTS') }} "STG_EVENTS"``: each ref names a node
by its storage location and name, and resolves to the node's table in the environment being built.
``ref_link`` and ``ref_no_link`` are the same reference with a different effect on Coalesce's graph.
Other templates are left as they are.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["RefSyntaxError", "find_refs", "resolve_refs"]

_REF_START = re.compile(r"\{\{\s*ref(?:_link|_no_link)?\s*\(")
_REF = re.compile(
    r"""\{\{\s*ref(?:_link|_no_link)?\s*\(\s*
        (?P<q1>['"])(?P<location>[^'"]*)(?P=q1)\s*,\s*
        (?P<q2>['"])(?P<name>[^'"]*)(?P=q2)\s*
        \)\s*\}\}""",
    re.VERBOSE,
)


class RefSyntaxError(ValueError):
    """A ``{{ ref(...) }}`` that is not ``{{ ref('LOCATION', 'NODE') }}``."""

    def __init__(self, text: str, position: int):
        self.text = text
        self.position = position
        snippet = text[position : position + 60].splitlines()[0]
        super().__init__(
            f"malformed ref at position {position}: {snippet!r} (expected {{{{ ref('LOCATION', 'NODE') }}}})"
        )


def _matches(text: str) -> list[re.Match[str]]:
    matches = []
    for start in _REF_START.finditer(text):
        match = _REF.match(text, start.start())
        if match is None or not match["location"] or not match["name"]:
            raise RefSyntaxError(text, start.start())
        matches.append(match)
    return matches


def find_refs(text: str) -> list[tuple[str, str]]:
    """The ``(location, node name)`` of each ref in ``text``, in order of first appearance, without
    repeats. Raises :class:`RefSyntaxError` for a malformed ref.
    """
    seen: dict[tuple[str, str], None] = {}
    for match in _matches(text):
        seen.setdefault((match["location"], match["name"]), None)
    return list(seen)


def resolve_refs(text: str, resolver: Callable[[str, str], str]) -> str:
    """``text`` with each ref replaced by ``resolver(location, name)``, typically the node's
    :func:`table_reference` in an environment. Raises :class:`RefSyntaxError` for a malformed ref.
    """
    parts, last = [], 0
    for match in _matches(text):
        parts += [text[last : match.start()], resolver(match["location"], match["name"])]
        last = match.end()
    parts.append(text[last:])
    return "".join(parts)
