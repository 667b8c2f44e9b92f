"""The code location's entry point, under a name deployments keep whatever the package's layout:
``dagster api grpc -m dw_dagster.definitions``, ``workspace.yaml``, the Helm chart's ``dagsterApiGrpcArgs``.
The definitions are built by the composition root (:mod:`dw_dagster.app.definitions`)."""

from dw_dagster.app.definitions import defs

__all__ = ["defs"]
