"""How a key is named everywhere: ``ACCOUNT_ID=42``, and a NULL key as ``ACCOUNT_ID IS NULL``.

A recorded total's group labels come from the checks (``COLUMN=value``, where a NULL value reads ``None``
or ``NULL`` depending on who wrote it); :func:`split_label` reads either, so a NULL key found in a join and
the same NULL group in a recorded history are the same key.
"""

from __future__ import annotations

import re
from typing import Any

_NULL_WORDS = ("None", "NULL", "null", "nan", "NaN")


def plain(value: Any) -> str | None:
    """A key value as a label shows it (``42``, not ``42.0``); None for a NULL."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def key_label(column: str, value: str | None) -> str:
    return f"{column} IS NULL" if value is None else f"{column}={value}"


def split_label(label: str) -> tuple[str, str | None]:
    """``("ACCOUNT_ID", "42")`` from ``ACCOUNT_ID=42``; ``("ACCOUNT_ID", None)`` from ``ACCOUNT_ID IS NULL``
    or a recorded ``ACCOUNT_ID=None``."""
    if label.upper().endswith(" IS NULL"):
        return label[: -len(" IS NULL")].strip(), None
    column, _, value = label.partition("=")
    return column.strip(), None if value in _NULL_WORDS else value


_NEXT_LABEL = re.compile(r", (?=[A-Za-z_][A-Za-z0-9_$]*(?:=| IS NULL))")


def split_labels(label: str) -> list[str]:
    """The per-column labels of a key of several columns (``SITE_CODE=7, LINE IS NULL`` ->
    ``["SITE_CODE=7", "LINE IS NULL"]``); a one-column label as it is."""
    return _NEXT_LABEL.split(label)


def same_key(label: str, column: str, value: str | None) -> bool:
    c, v = split_label(label)
    return c.upper() == column.upper() and v == value


def typed(value: str, data_type: str) -> Any:
    """A key value from a label, as its column holds it: a whole number for an integer column (NUMBER(38,0),
    INT...), a number for another numeric column, else the text as it is (a VARCHAR key keeps its leading
    zeros)."""
    t = data_type.upper().replace(" ", "")
    integral = t.startswith(("INT", "BIGINT", "SMALLINT", "TINYINT", "BYTEINT")) or (
        t.startswith(("NUMBER", "DECIMAL", "NUMERIC")) and ("," not in t or t.endswith(",0)"))
    )
    try:
        if integral:
            return int(value)
        if t.startswith(("NUMBER", "DECIMAL", "NUMERIC", "FLOAT", "DOUBLE", "REAL")):
            return float(value)
    except ValueError:
        pass
    return value
