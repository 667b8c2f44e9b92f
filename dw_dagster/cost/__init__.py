"""Snowflake cost attribution: credits per Coalesce Job, node and run, and per dw-dagster check and diagnosis.

``history`` reads Snowflake's ACCOUNT_USAGE views, ``tags`` reads the query tags, ``attribution`` sums the
credits per spender, ``jump`` judges a node's night against its own baseline, ``job`` is the nightly job,
its asset and the sensor that starts it, ``commands`` is ``dw-dagster cost report`` (docs/cost.md).
"""

COST_CHECK = "cost_jump"
"""The check name of a cost-jump finding (its diagnosis is the jump itself: the credits and what grew)."""
