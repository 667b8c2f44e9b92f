"""dw-dagster: production operations for Coalesce pipelines over Snowflake, as a Dagster code location."""
