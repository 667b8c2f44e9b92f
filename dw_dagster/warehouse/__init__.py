"""The warehouse: Snowflake through dagster-snowflake's resource, with every query tagged."""

from dw_dagster.warehouse.resources import WarehouseResource, warehouse_from_env

__all__ = ["WarehouseResource", "warehouse_from_env"]
