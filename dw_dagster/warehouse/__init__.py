"""The warehouse: Snowflake through the connector, configured as dagster-snowflake's resource is, with every query tagged.

Import from the modules: ``resources`` (the runs' resource) imports Dagster, ``settings`` and ``connections``
(what the commands open outside Dagster) do not."""
