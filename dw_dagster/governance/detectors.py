"""What looks sensitive: a column's name or description, or the values sampled from it.

Names are read in lower case with ``_``, ``-``, ``.`` and camelCase humps as spaces (``CustomerEmail`` and
``CUSTOMER_EMAIL`` both read ``customer email``), so a pattern matches words, not fragments of them
(``\\bssn\\b`` does not fire on ``CLASSNAME``). A value pattern must match the whole value; card numbers must
also pass the Luhn check, so that a column of long numeric ids is not taken for one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from dw_dagster.context.governance import GovernanceConfig

DEFAULT_NAMES: Mapping[str, tuple[str, ...]] = {
    "email": (r"\be ?mail\b", r"\bemail address\b"),
    "phone": (r"\bphone\b", r"\btelephone\b", r"\bmobile\b", r"\bcell ?phone\b", r"\bfax\b", r"\bmsisdn\b"),
    "national_id": (
        r"\bssn\b",
        r"\bsocial security\b",
        r"\bnational (id|identifier|insurance|number)\b",
        r"\bnino\b",
        r"\bpassport\b",
        r"\btax (id|identifier|number)\b",
        r"\b(driver'?s? )?licen[cs]e (number|no)\b",
    ),
    "card_number": (
        r"\b(credit |debit |payment )?card (number|num|no|pan)\b",
        r"\bpan\b",
        r"\bcc (number|num|no)\b",
    ),
    "date_of_birth": (
        r"\bdob\b",
        r"\bbirth ?date\b",
        r"\bdate of birth\b",
        r"\bborn (on|at)\b",
        r"\bbirthday\b",
    ),
    "address": (
        r"\b(street|postal|mailing|home|billing|shipping) address\b",
        r"\baddress( line)? ?\d?\b",
        r"\bstreet\b",
        r"\bpost ?code\b",
        r"\bzip( code)?\b",
    ),
}

DEFAULT_VALUES: Mapping[str, tuple[str, ...]] = {
    "email": (r"[A-Za-z0-9._%+'-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}",),
    "phone": (
        r"\+\d{1,3}[ .-]?(\(\d{1,4}\)[ .-]?)?\d{2,4}([ .-]?\d{2,4}){1,3}",
        r"\(?\d{3}\)?[ .-]\d{3}[ .-]\d{4}",
    ),
    "national_id": (
        r"\d{3}-\d{2}-\d{4}",  # US social security number
        r"[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D]",  # UK national insurance number
    ),
    "card_number": (r"\d(?:[ -]?\d){12,18}",),
    "address": (
        r"\d{1,6}[A-Za-z]? (?:[A-Za-z.']+ ){1,5}(?:street|st|avenue|ave|road|rd|lane|ln|drive|dr|boulevard|blvd"
        r"|way|court|ct|place|pl|terrace|close)\.?(?:,.*)?",
    ),
}


def luhn_valid(value: str) -> bool:
    digits = [int(c) for c in value if c.isdigit()]
    if not 13 <= len(digits) <= 19:
        return False
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


# A value pattern's extra test, beyond matching in full.
VALUE_TESTS: Mapping[str, Callable[[str], bool]] = {"card_number": luhn_valid}


def words(text: str) -> str:
    """A name or description as lower-case words: ``CustomerEmail`` -> ``customer email``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", text)
    return " ".join(re.split(r"[\s_\-.:/]+", spaced.lower())).strip()


@dataclass(frozen=True)
class Match:
    category: str
    by: str
    """``name``, ``description`` or ``values``."""
    detail: str
    """The pattern that matched, or for values how many of the sample did."""


class Detectors:
    """The name and value patterns of every category, defaults merged with the context file's."""

    def __init__(self, config: GovernanceConfig | None = None):
        config = config or GovernanceConfig()
        self.config = config
        names: dict[str, list[str]] = {}
        values: dict[str, list[str]] = {}
        if config.use_defaults:
            for category, patterns in DEFAULT_NAMES.items():
                names.setdefault(category, []).extend(patterns)
            for category, patterns in DEFAULT_VALUES.items():
                values.setdefault(category, []).extend(patterns)
        for category, patterns in config.names.items():
            names.setdefault(category, []).extend(patterns)
        for category, patterns in config.values.items():
            values.setdefault(category, []).extend(patterns)
        self.names = {c: [re.compile(p, re.IGNORECASE) for p in ps] for c, ps in names.items()}
        self.values = {c: [re.compile(p, re.IGNORECASE) for p in ps] for c, ps in values.items()}

    @property
    def samples_values(self) -> bool:
        return bool(self.values)

    def by_metadata(self, name: str, description: str | None) -> Match | None:
        """The first category the column's name, else its description, reads as."""
        for by, text in (("name", name), ("description", description or "")):
            read = words(text)
            if not read:
                continue
            for category, patterns in self.names.items():
                for pattern in patterns:
                    if pattern.search(read):
                        return Match(category, by, pattern.pattern)
        return None

    def by_values(self, sample: Iterable[object]) -> Match | None:
        """The category most of the sampled values (at least ``min_share``) match, if any."""
        texts = [str(v).strip() for v in sample if v is not None and str(v).strip()]
        if not texts:
            return None
        best: tuple[int, str] | None = None
        for category, patterns in self.values.items():
            test = VALUE_TESTS.get(category)
            hits = sum(
                1 for t in texts if any(p.fullmatch(t) for p in patterns) and (test is None or test(t))
            )
            if hits and (best is None or hits > best[0]):
                best = (hits, category)
        if best is None or best[0] / len(texts) < self.config.min_share:
            return None
        return Match(best[1], "values", f"{best[0]} of {len(texts)} sampled values")
