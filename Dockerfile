# syntax=docker/dockerfile:1.7
# One image for every Dagster process of the deployment: the gRPC code server (the Helm chart's user
# deployment), the run workers the K8sRunLauncher starts from it, and the webserver and the daemon, which load
# no dw-dagster definitions (they talk to the code server over gRPC) but do load the instance's event log
# storage, dw_dagster.event_log.postgres (docs/production.md, "A checks run's planned events").
#
#   docker build -t your-registry/dw-dagster:$(git rev-parse --short HEAD) \
#     --build-arg COALESCE_BASE_URL=https://app.coalescesoftware.io --build-arg COALESCE_ENVIRONMENT_IDS=2 \
#     --secret id=coalesce_token,env=COALESCE_API_TOKEN .
#
# Not built or run by the test suite; tests/production runs the same processes from the same files.
FROM python:3.11-slim

# DAGSTER_EVENT_BATCH_SIZE: Dagster hands the planned events of a run it creates (the daemon, the webserver)
# to the event log storage in batches of up to this many, which dw_dagster.event_log stores in one
# transaction each; unset, Dagster stores them one at a time (30 s and more for a 2,000-check run).
ENV PYTHONUNBUFFERED=1 \
    DAGSTER_EVENT_BATCH_SIZE=1000 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SNOWFLAKE_DISABLE_PLATFORM_DETECTION=true \
    DW_COALESCE_STATE=LOCAL_FILESYSTEM \
    DAGSTER_HOME=/opt/dagster/dagster_home

WORKDIR /opt/dw
COPY pyproject.toml README.md ./
COPY dw_dagster ./dw_dagster
# The product only (the local world is a distribution of its own, never installed here), with its Postgres
# storage and MCP server; the launcher at the integration libraries' version that goes with dagster 1.13.27.
RUN pip install ".[postgres,mcp]" "dagster-k8s==0.29.27"

# Loading the code location never calls Coalesce: the node graph is the Coalesce component's state, refreshed
# here at build time (DW_COALESCE_STATE=LOCAL_FILESYSTEM keeps it beside the installed code) so that the code server and every run worker started from this image read the same
# graph. The token is a BuildKit secret: it stays out of the image's layers and history.
ARG COALESCE_BASE_URL
ARG COALESCE_ENVIRONMENT_IDS
RUN --mount=type=secret,id=coalesce_token,required=true \
    COALESCE_API_TOKEN="$(cat /run/secrets/coalesce_token)" \
    COALESCE_BASE_URL="${COALESCE_BASE_URL}" COALESCE_ENVIRONMENT_IDS="${COALESCE_ENVIRONMENT_IDS}" \
    dw-dagster coalesce refresh
# The context and metrics files are the team's: bake them in beside the code (or mount them).
COPY deploy/files/ /opt/dw/files/
ENV DW_CONTEXT_FILE=/opt/dw/files/context.yaml \
    DW_METRICS_FILE=/opt/dw/files/metrics.yaml \
    COALESCE_BASE_URL=${COALESCE_BASE_URL} \
    COALESCE_ENVIRONMENT_IDS=${COALESCE_ENVIRONMENT_IDS}

USER 1000
EXPOSE 4000
# What the Helm chart runs (dagsterApiGrpcArgs in deploy/values.yaml); standalone it is the same.
CMD ["dagster", "api", "grpc", "-m", "dw_dagster.app.definitions", "-h", "0.0.0.0", "-p", "4000"]
