"""The pipeline's own words for its messages, read from the context and metrics files.

- What the items are called (``item_noun`` of a total in the metrics file): the items in a key's gap are
  the failing total's (``1,260 line items`` where the metrics file calls them so); the newly flagged
  items are those of the total that flagged them.
- What the consumers are asked to do while an incident is open (``hold_action`` of the domain in the
  context file, e.g. "Hold outgoing payments").
- The names of the totals the evidence compares (``target_change_pct`` reads ``open_order_amount change``
  where the metrics file names the reconciled total so).

Without a metrics file or a domain the words are neutral: "items", "Hold decisions".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dw_dagster.checks.metrics import MetricsFile, RecordedTotal
from dw_dagster.context.models import ContextFile, Domain
from dw_dagster.notifications.routing import flagged_assets, incident_domain
from dw_dagster.notifications.text import humanise
from dw_dagster.records.incidents import BlastRadius, Diagnosis

DEFAULT_ITEM_NOUN: str = RecordedTotal.model_fields["item_noun"].default
DEFAULT_HOLD_ACTION: str = Domain.model_fields["hold_action"].default


@dataclass(frozen=True)
class Wording:
    item_noun: str = DEFAULT_ITEM_NOUN
    """The items a key's gap is spread over."""
    flagged_noun: str = DEFAULT_ITEM_NOUN
    """The newly flagged items (the hold notice's)."""
    hold_action: str = DEFAULT_HOLD_ACTION
    target_total: str | None = None
    """The total that failed to reconcile (evidence keys ``target_*``)."""
    source_total: str | None = None
    """The source total it reconciles with (evidence keys ``source_*``)."""

    def evidence_label(self, key: str) -> str:
        """An evidence key in words, the compared totals by their own names."""
        for prefix, total in (("target_", self.target_total), ("source_", self.source_total)):
            if total and key.startswith(prefix):
                return f"{humanise(total)} {humanise(key[len(prefix) :]).lower()}"
        return humanise(key)


def wording_for(
    context: ContextFile | None,
    metrics: MetricsFile | None,
    diagnosis: Diagnosis | None = None,
    blast: BlastRadius | None = None,
) -> Wording:
    """The words for one incident's messages."""
    blast = blast or BlastRadius()
    found = incident_domain(context, diagnosis, blast) if context and diagnosis else None
    hold_action = found[1].hold_action if found else DEFAULT_HOLD_ACTION
    if metrics is None:
        return Wording(hold_action=hold_action)
    path = list(diagnosis.path) if diagnosis else []
    # Nearest the failing end of the path first: that is the total whose gap the keys hold.
    on_path = sorted(
        (t for t in metrics.totals if t.asset in path), key=lambda t: path.index(t.asset), reverse=True
    )
    target = next((t for t in on_path if t.reconcile_with), None)
    itemised = next((t for t in ([target] if target else []) + on_path if t.item_key), None)
    by_name = {t.name: t for t in metrics.totals}
    flagged_by = [
        by_name[name]
        for a in flagged_assets(blast)
        for name, change in a.change.items()
        if name in by_name and isinstance(change, Mapping) and change.get("newly_flagged")
    ]
    return Wording(
        item_noun=itemised.item_noun if itemised else DEFAULT_ITEM_NOUN,
        flagged_noun=flagged_by[0].item_noun if flagged_by else DEFAULT_ITEM_NOUN,
        hold_action=hold_action,
        target_total=target.name if target else None,
        source_total=target.reconcile_with.total if target and target.reconcile_with else None,
    )
