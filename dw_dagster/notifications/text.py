"""Text as a person writes it in Slack: numbers rounded, names humanised from the data, times in the
reader's time zone, and data escaped for mrkdwn.

- Numbers: integers with thousands separators (``41,800``); other values rounded to what a person would
  write (``-1.8%``, ``2.4``, ``0.25``), never ``-1.7960491884065721``.
- Names come from the data and are humanised by their shape alone, never from a word list: a snake_case
  name (a total, a metric key) reads as words (``rows_affected`` -> ``rows affected``); an identifier
  written in capitals (a column, a node, a test) is left as the warehouse spells it (``ACCOUNT_ID``).
- Times are Slack date tokens (``<!date^1750145400^{date_short_pretty} {time}|2025-06-17 07:30 UTC>``):
  Slack shows them in each reader's own time zone, the fallback in UTC.
- No Python repr reaches a reader: mappings read ``COL = value``, lists comma-separated, ``None`` "none".
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from typing import Any

SLACK_DATE_FORMAT = "{date_short_pretty} {time}"
_IDENTIFIER = re.compile(r"^[A-Z][A-Z0-9_$]*$")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_DATE_TOKEN = re.compile(r"<!date\^\d+\^[^|<>^]*\|[^<>|]*>")


def escape(text: Any) -> str:
    """Escapes the three characters mrkdwn treats as control characters; a Slack date token that
    :func:`slack_date` made (a formatted value) is kept, so a time reads in the reader's zone wherever it is."""
    raw, out, last = str(text), [], 0
    for m in _DATE_TOKEN.finditer(raw):
        out += [_escape(raw[last : m.start()]), m.group()]
        last = m.end()
    return "".join([*out, _escape(raw[last:])])


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def truncate(text: str, limit: int, marker: str = "…") -> str:
    return text if len(text) <= limit else text[: max(0, limit - len(marker))] + marker


def fmt_count(n: int) -> str:
    return f"{n:,}"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 row``, ``3 rows``: a count with its noun, as a person writes it (never ``row(s)``)."""
    return f"{fmt_count(n)} {noun if n == 1 else plural or noun + 's'}"


def fmt_number(value: float) -> str:
    """``41800.0`` -> ``41,800``; ``2.35`` -> ``2.4``; ``0.0312`` -> ``0.031``; ``1234.56`` -> ``1,235``."""
    if not math.isfinite(value):
        return str(value)
    if float(value).is_integer():
        return f"{int(value):,}"
    size = abs(value)
    # Hundreds and up read whole; units keep one decimal; below one, two significant digits.
    digits = 0 if size >= 100 else 1 if size >= 1 else 1 - math.floor(math.log10(size))
    text = f"{value:,.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def fmt_pct(value: float, *, signed: bool) -> str:
    """Percentage points: ``-1.796`` -> ``-1.8%``; a small non-zero change keeps two decimals (``0.03%``)."""
    digits = 1 if abs(value) >= 0.05 or value == 0 else 2
    return f"{value:{'+' if signed else ''},.{digits}f}%"


def is_change(key: str) -> bool:
    """A ``*_pct`` key that is a change carries its sign (``+0.2%``); a level or a bound does not."""
    k = key.lower()
    bound = any(w in k for w in ("baseline", "max", "min", "threshold", "tolerance"))
    return ("change" in k or "delta" in k) and not bound


def fmt_value(key: str, value: Any) -> str:
    """A value as a person reads it; ``key`` says what it is (``*_pct`` keys are percentage points)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        if key.lower().endswith("_pct"):
            return fmt_pct(float(value), signed=is_change(key))
        return fmt_number(float(value))
    if isinstance(value, datetime):
        return slack_date(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return ", ".join(f"{k} = {fmt_datum(v)}" for k, v in value.items()) or "none"
    if isinstance(value, Sequence) and not isinstance(value, str):
        return ", ".join(fmt_value(key, v) for v in value) or "none"
    return str(value)


def fmt_datum(value: Any) -> str:
    """A value as the warehouse holds it (a key, a cell of a row): no thousands separators, ``NULL``."""
    if value is None:
        return "NULL"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def humanise(name: str) -> str:
    """A name from the data, readable: ``gap_change_pct`` -> ``Gap change``,
    ``rowsAffected`` -> ``Rows affected``; an identifier in capitals (``NO_UNMATCHED_DIM_ACCOUNT``) and
    an asset key path (``mart/mart_open_orders``) are left as the data spells them."""
    if _IDENTIFIER.match(name) or "/" in name:
        return name
    words = [w for w in re.split(r"[_\-\s]+", _CAMEL.sub("_", name)) if w]
    if len(words) > 1 and words[-1].lower() == "pct":
        words = words[:-1]
    text = " ".join(w.lower() for w in words)
    return (text[:1].upper() + text[1:]) or name


# A snake_case name standing alone in a sentence (a total, a metric key), not part of an asset key path
# (``mart/mart_orders``), a dotted or quoted identifier, or a word in capitals.
_SNAKE_NAME = re.compile(r"(?<![\w/.\"'`])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w/.\"'`])")


def humanise_names(text: str) -> str:
    """The snake_case names in a sentence from the data read as words: ``open_order_amount fell 1.8%``
    -> ``open order amount fell 1.8%``; asset keys, identifiers in capitals and quoted names are left."""
    return _SNAKE_NAME.sub(lambda m: m.group().replace("_", " "), text)


def rounded(value: Any) -> Any:
    """Figures in a JSON document as a person reads them: floats to two decimals (two significant digits
    below 0.01), recursively; everything else as it is."""
    if isinstance(value, float) and math.isfinite(value):
        return round(value, 2) if abs(value) >= 0.01 or value == 0 else float(f"{value:.2g}")
    if isinstance(value, Mapping):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v) for v in value]
    return value


def fmt_change(change: Mapping[str, Any], skip: Sequence[str] = ()) -> str:
    """What changed, in words. Pairs read as before → after, nested totals by name:

    ``{"overdue_accounts": {"before": 31, "after": 195, "newly_flagged": 164}, "rows_affected": 164}``
    -> ``overdue accounts 31 → 195 (newly flagged 164) · rows affected 164``;
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
                parts.append(f"{_lower(key)} {pair}" + (f" ({rest})" if rest else ""))
            else:
                parts.append(f"{_lower(key)}: {fmt_change(value, skip=skip)}")
            done.add(key)
        elif key.endswith("_before") and f"{key[:-7]}_after" in change:
            stem = key[:-7]
            after = f"{stem}_after"
            before, now = fmt_value(stem, change[key]), fmt_value(stem, change[after])
            parts.append(f"{_lower(stem)} {before} → {now}")
            done.update({key, after})
        elif key.endswith("_after") and f"{key[:-6]}_before" in change:
            continue
        elif key == "before" and "after" in change:
            parts.append(f"{fmt_value(key, change['before'])} → {fmt_value(key, change['after'])}")
            done.update({"before", "after"})
        else:
            parts.append(f"{_lower(key)} {fmt_value(key, change[key])}")
            done.add(key)
    return " · ".join(parts)


def _lower(key: str) -> str:
    text = humanise(key)
    return text if text == key else lower_first(text)


def lower_first(text: str) -> str:
    """``Hold new orders`` -> ``hold new orders`` mid-sentence; a first word in capitals
    (``SAP orders``) stays as written."""
    first = text.split(" ", 1)[0]
    return text if first.isupper() and len(first) > 1 else text[:1].lower() + text[1:]


def slack_date(moment: datetime, fmt: str = SLACK_DATE_FORMAT, link: str | None = None) -> str:
    """A Slack date token: each reader sees ``moment`` in their own time zone; clients that cannot render
    it show the UTC fallback."""
    at = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    fallback = at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(at.timestamp())}^{fmt}{'^' + link if link else ''}|{fallback}>"


def more_line(n: int, noun: str, hint: str = "") -> str:
    return f"_… and {fmt_count(n)} more {noun}{(' ' + hint) if hint else ''}_"


def fit_lines(heading: str, lines: Sequence[str], limit: int, noun: str, more_hint: str = "") -> str:
    """``heading`` then as many ``lines`` as fit in ``limit`` characters, then "… and N more <noun>"."""
    text = heading
    for i, line in enumerate(lines):
        rest = len(lines) - i - 1
        candidate = f"{text}\n{line}" if text else line
        # Keep room for the overflow line as long as more lines may follow.
        reserve = len(more_line(len(lines), noun, more_hint)) + 1 if rest else 0
        if len(candidate) + reserve > limit:
            more = more_line(len(lines) - i, noun, more_hint)
            return truncate(f"{text}\n{more}" if text else more, limit)
        text = candidate
    return text


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
