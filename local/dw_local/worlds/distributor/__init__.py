"""The distributor of the reference night: Oracle EBS via Qlik, a region map, the inventory pipeline.

``world.yaml`` is the data file, ``project.yaml`` the Coalesce project, ``generator.DistributorWorld``
loads and plays it.
"""
