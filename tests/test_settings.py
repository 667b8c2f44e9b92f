"""The commands' settings are the operations component's own attributes, read without loading the code
location."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dw_dagster.app.project import operations_component
from dw_dagster.app.settings import Settings, _environment, operations_attributes
from dw_dagster.config import DwConfigError


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"DW_CONTEXT_FILE": "/srv/dw/context.yaml", "DW_METRICS_FILE": "/srv/dw/metrics.yaml"},
        {"DW_CONTEXT_FILE": "ctx.yaml", "SNOWFLAKE_DATABASE": "DW_PROD"},
    ],
)
def test_settings_read_what_the_component_loads(environ):
    settings = Settings.from_env(environ)
    with _environment(environ):
        component = operations_component()
    assert settings.context_file == (
        Path(component.context_file).resolve() if component.context_file else None
    )
    assert settings.metrics_file == (
        Path(component.metrics_file).resolve() if component.metrics_file else None
    )
    assert settings.database == environ.get("SNOWFLAKE_DATABASE")


def test_settings_do_not_load_the_code_location_nor_dagster():
    # The component's module imports every job, sensor and storage of the code location; Dagster's template
    # resolver, Dagster.
    code = (
        "import sys; from dw_dagster.app.settings import Settings; Settings.from_env({}); "
        "print(sorted(m for m in ('dw_dagster.app.components', 'dw_dagster.app.project', 'dagster') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"


def test_a_wrong_declaration_names_the_file_and_the_field(tmp_path):
    bad = tmp_path / "defs.yaml"
    bad.write_text("type: some.OtherComponent\nattributes: {}\n")
    with pytest.raises(DwConfigError, match=r"defs\.yaml: type: expected dw_dagster\.app\.components"):
        operations_attributes(bad)
    bad.write_text("type: dw_dagster.app.components.OperationsComponent\nattributes: [1]\n")
    with pytest.raises(DwConfigError, match="attributes: expected a mapping, got list"):
        operations_attributes(bad)


@pytest.mark.parametrize(
    "template",
    [
        "{{ env.DW_CONTEXT_FILE }}",
        "{{ env.DW_NOT_SET }}",
        "{{ env('DW_NOT_SET', 'fallback.yaml') }}",
        "/srv/{{ env.DW_CONTEXT_FILE }}",
        "plain.yaml",
        "",
    ],
)
def test_templates_render_as_dagsters_resolver_renders_them_without_importing_it(template, tmp_path):
    from dagster.components.resolved.context import ResolutionContext

    defs = tmp_path / "defs.yaml"
    defs.write_text(
        f'type: dw_dagster.app.components.OperationsComponent\nattributes:\n  context_file: "{template}"\n'
    )
    environ = {"DW_CONTEXT_FILE": "ctx.yaml"}
    with _environment(environ):
        ours = operations_attributes(defs)["context_file"]
        assert ours == ResolutionContext.default().resolve_value(template)
