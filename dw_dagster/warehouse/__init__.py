"""The warehouse: Snowflake through the connector, configured as dagster-snowflake's resource is, with every query tagged."""

from dw_dagster.warehouse.resources import WarehouseResource, warehouse_from_env

__all__ = ["WarehouseResource", "warehouse_from_env"]
