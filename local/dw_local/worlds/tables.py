"""A source table of a world as its Coalesce project declares it: what both world kinds (the distributor and
a world file) and the events they play read to name, type and load it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from dw_dagster.sql import quote_identifier, table_reference

_FLOAT = re.compile(r"^(FLOAT\d?|DOUBLE|REAL)\b")
_NUMERIC = re.compile(r"^(NUMBER|DECIMAL|NUMERIC|INT|INTEGER|BIGINT|SMALLINT|TINYINT|BYTEINT|FLOAT\d?|DOUBLE|REAL)\b",
                      re.IGNORECASE)  # fmt: skip
_SCALE = re.compile(r"\(\s*\d+\s*,\s*(\d+)\s*\)")


@dataclass(frozen=True)
class SourceRef:
    name: str
    database: str
    schema: str
    columns: list[str]
    types: dict[str, str]
    ddl: str  # the column definitions

    @property
    def qualified(self) -> str:
        return table_reference(self.database, self.schema, self.name)

    def actual_columns(self, cur) -> list[str]:
        """The table's columns as Snowflake now has them, in order (a schema event may have changed them)."""
        cur.execute(
            f"SELECT COLUMN_NAME FROM {quote_identifier(self.database)}.INFORMATION_SCHEMA.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (self.schema, self.name),
        )
        return [r[0] for r in cur.fetchall()]

    def is_numeric(self, column: str) -> bool:
        return bool(_NUMERIC.match(self.types[column]))

    def scale(self, column: str) -> int | None:
        """Decimal places the column keeps (None: a float keeps them all)."""
        data_type = self.types[column].upper()
        if _FLOAT.match(data_type):
            return None
        m = _SCALE.search(data_type)
        return int(m[1]) if m else 0
