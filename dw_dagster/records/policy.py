"""How incidents live and end: the ``incidents`` section of the metrics file (``docs/incidents.md``).

```yaml
incidents:
  resolve_after_clean_nights: 1   # resolve when every check of the incident passed on this many later nights
  stale_after_nights: 3           # open, no new finding for this many reported nights: marked stale
  reopen_within_nights: 3         # the same cause back within this many nights of its last finding reopens
  explained_nights: 1             # nightly runs after a verified fix whose row-count step the fix explains
```
Nights are business dates the pipeline reported (a Coalesce run and its checks), not wall-clock days, so a
weekend without runs does not age an incident and a replayed history ages it night by night.
"""

from __future__ import annotations

from pydantic import Field

from dw_dagster.config import FileModel


class IncidentPolicy(FileModel):
    resolve_after_clean_nights: int = Field(
        default=1,
        ge=1,
        description="An open incident resolves once every check whose failure belongs to it has passed "
        "on this many nights after its last finding (1: the next clean night).",
    )
    stale_after_nights: int = Field(
        default=3,
        ge=1,
        description="An open incident with no new finding for this many reported nights is marked stale "
        "(in the UI and its threads); a stale incident never absorbs a new finding.",
    )
    reopen_within_nights: int = Field(
        default=3,
        ge=0,
        description="A resolved incident whose cause returns within this many nights of its last finding "
        "is reopened (a reply in its thread); later, or with 0, the return is a new incident.",
    )
    explained_nights: int = Field(
        default=1,
        ge=0,
        description="After a verified fix, the row-count step it makes on the tables it rebuilt is "
        "explained, not an incident: on the rebuilt night and on this many nightly runs after it.",
    )
