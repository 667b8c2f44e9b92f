"""The context graph: the systems around a Coalesce pipeline (ERP tables, replication, reference data, BI
consumers), their owners, and how they connect to the Coalesce nodes.

Import from the modules (``models``, ``specs``, ``lineage``): the asset specs import Dagster, which a command
that only reads the context file does not pay for."""
