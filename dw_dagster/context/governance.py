"""The ``governance`` section of the context file: who owns sensitive data, and what looks sensitive.

```yaml
governance:
  owners: [data-governance]          # team ids from `teams`: the findings are theirs
  names:                             # extra column-name (and description) patterns, by category
    national_id: ['\\bbsn\\b']
  values:                            # extra patterns a sampled value matches in full, by category
    national_id: ['\\d{4}\\.\\d{2}\\.\\d{3}']
  ignore: ['raw_crm/customers:EMAIL_HASH']   # globs over ASSET:COLUMN known not to be sensitive
  sample_rows: 200                   # at most this many non-null values are read from a new column
  min_share: 0.5                     # share of sampled values that must match a value pattern
```

Every category of :mod:`dw_dagster.governance.detectors` applies by default (``use_defaults: false`` keeps
only the patterns given here); a category named here that is not a default is a new one.
"""

from __future__ import annotations

import fnmatch
import re

from pydantic import Field, field_validator

from dw_dagster.config import FileModel


def _compile_all(patterns: dict[str, list[str]]) -> dict[str, list[str]]:
    for category, items in patterns.items():
        if not re.fullmatch(r"[a-z][a-z0-9_]*", category):
            raise ValueError(f"{category!r}: expected a category name in lower case, like 'national_id'")
        for i, pattern in enumerate(items):
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"{category}[{i}]: {pattern!r} is not a regular expression ({e})") from None
    return patterns


class GovernanceConfig(FileModel):
    owners: list[str] = Field(
        default_factory=list,
        description="Team ids from `teams` that own sensitive data; empty: the owners of the column's node.",
    )
    names: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Regular expressions searched in a column's name (underscores read as spaces, lower case) "
        "and description, by category.",
    )
    values: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Regular expressions a sampled value must match in full, by category.",
    )
    use_defaults: bool = Field(default=True, description="Apply the default categories as well.")
    ignore: list[str] = Field(
        default_factory=list, description="Globs over 'ASSET_KEY_PATH:COLUMN' never flagged."
    )
    sample_rows: int = Field(default=200, ge=1, le=10_000)
    min_share: float = Field(default=0.5, gt=0, le=1)

    @field_validator("names", "values")
    @classmethod
    def _patterns(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        return _compile_all(v)

    def ignored(self, asset_key: str, column: str) -> bool:
        target = f"{asset_key}:{column}"
        return any(fnmatch.fnmatchcase(target.lower(), g.lower()) for g in self.ignore)
