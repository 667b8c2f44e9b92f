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
# Each RUN is one step of deploy/image-steps.sh. No image is built by the test suite; it runs the same steps,
# read from this file in this order, in a scratch folder and a fresh venv (tests/production/image.py), then
# serves the code location from what they installed.

# The product's wheel, built from the source tree: the image installs the wheel, never the checkout.
FROM python:3.11-slim AS wheel
COPY deploy/image-steps.sh /usr/local/bin/dw-image-step
WORKDIR /src
COPY pyproject.toml README.md ./
COPY dw_dagster ./dw_dagster
RUN dw-image-step wheel /src /wheels

FROM python:3.11-slim

# DAGSTER_EVENT_BATCH_SIZE: Dagster hands the planned events of a run it creates (the daemon, the webserver)
# to the event log storage in batches of up to this many, which dw_dagster.event_log stores in one
# transaction each; unset, Dagster stores them one at a time (30 s and more for a 2,000-check run).
# DW_COALESCE_STATE=LOCAL_FILESYSTEM: the Coalesce state lives in the installed package, written at build time
# (the refresh step below), so the code server and every run worker started from this image read the same graph.
ENV PYTHONUNBUFFERED=1 \
    DAGSTER_EVENT_BATCH_SIZE=1000 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SNOWFLAKE_DISABLE_PLATFORM_DETECTION=true \
    DW_COALESCE_STATE=LOCAL_FILESYSTEM \
    DAGSTER_HOME=/opt/dagster/dagster_home

COPY deploy/image-steps.sh /usr/local/bin/dw-image-step
COPY --from=wheel /wheels /wheels
# The run launcher's package, at the integration libraries' version that goes with dagster 1.13.27
# (dagster-docker==0.29.27 for the DockerRunLauncher; empty for the default launcher).
ARG RUN_LAUNCHER_PACKAGE="dagster-k8s==0.29.27"
RUN --mount=type=cache,target=/root/.cache/uv RUN_LAUNCHER_PACKAGE="${RUN_LAUNCHER_PACKAGE}" dw-image-step install /wheels
RUN dw-image-step home

# Loading the code location never calls Coalesce: the node graph is the Coalesce component's state, refreshed
# here. The token is a BuildKit secret: it stays out of the image's layers and history.
ARG COALESCE_BASE_URL
ARG COALESCE_ENVIRONMENT_IDS
RUN --mount=type=secret,id=coalesce_token,required=true \
    COALESCE_API_TOKEN="$(cat /run/secrets/coalesce_token)" \
    COALESCE_BASE_URL="${COALESCE_BASE_URL}" COALESCE_ENVIRONMENT_IDS="${COALESCE_ENVIRONMENT_IDS}" \
    dw-image-step refresh
# The context and metrics files are the team's: bake them in beside the code (or mount them).
COPY deploy/files/ /opt/dw/files/
ENV DW_CONTEXT_FILE=/opt/dw/files/context.yaml \
    DW_METRICS_FILE=/opt/dw/files/metrics.yaml \
    COALESCE_BASE_URL=${COALESCE_BASE_URL} \
    COALESCE_ENVIRONMENT_IDS=${COALESCE_ENVIRONMENT_IDS}
# The code location loads from what the steps installed, with the team's files, before the image is pushed.
RUN dw-image-step check

USER 1000
EXPOSE 4000
# What the Helm chart runs (dagsterApiGrpcArgs in deploy/values.yaml); standalone it is the same.
CMD ["dagster", "api", "grpc", "-m", "dw_dagster.definitions", "-h", "0.0.0.0", "-p", "4000"]
