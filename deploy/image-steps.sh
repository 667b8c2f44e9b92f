#!/bin/sh
# The image's build steps. The Dockerfile runs them, one RUN each, in its order; the test suite runs the same
# steps, read from the Dockerfile in the same order, in a scratch folder and a fresh venv
# (tests/production/image.py), so the two cannot drift. Each step is one word and its arguments:
#
#   wheel SRC OUT     build the product's wheel from the source tree SRC into OUT (the wheel is the product)
#   install WHEELS    install it (uv) with its Postgres storage and MCP server, and $RUN_LAUNCHER_PACKAGE if set
#   home              create DAGSTER_HOME, which Dagster refuses to run without
#   refresh           fetch the Coalesce state into the installed package (DW_COALESCE_STATE=LOCAL_FILESYSTEM)
#   check             load the code location's definitions, as the code server and every run worker will
set -eu
step="$1"
shift
case "$step" in
  wheel)
    pip wheel --no-deps --no-cache-dir --wheel-dir "$2" "$1"
    ;;
  install)
    wheel=$(ls "$1"/dw_dagster-*.whl)
    # uv installs the same requirements as pip in a fraction of the time (the suite's install: 103 s against
    # 793 s); it is removed once it has. Compiled at install: the image's site-packages is read-only to its
    # processes, which would otherwise compile every module again at each start (a code server, each run
    # worker). uv's cache is the Dockerfile's cache mount, never a layer.
    python3 -m pip install -q uv==0.13.9
    # shellcheck disable=SC2086 - the launcher package is one requirement or none
    python3 -m uv pip install -q --python "$(command -v python3)" --compile-bytecode \
      "${wheel}[postgres,mcp]" ${RUN_LAUNCHER_PACKAGE:-}
    python3 -m pip uninstall -q -y uv
    ;;
  home)
    mkdir -p "$DAGSTER_HOME"
    ;;
  refresh)
    test "${DW_COALESCE_STATE:-}" = LOCAL_FILESYSTEM || {
      echo "refresh: DW_COALESCE_STATE must be LOCAL_FILESYSTEM to bake the state into the image" >&2
      exit 2
    }
    dw-dagster coalesce refresh
    ;;
  check)
    dagster definitions validate -m dw_dagster.definitions
    ;;
  *)
    echo "image-steps.sh: unknown step '$step' (wheel, install, home, refresh, check)" >&2
    exit 2
    ;;
esac
