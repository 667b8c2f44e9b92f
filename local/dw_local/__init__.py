"""The embedded local world: a local Snowflake, a Coalesce simulator and a Slack stand-in.

Nothing under ``dw_dagster`` imports this package: the product talks to these servers only over
their public protocols, exactly as it talks to the real services.
"""
