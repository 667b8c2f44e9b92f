"""Commands that refuse what they lack. (`world up --no-ui`, `world status`, `slack log`, `stop` / `resume`,
`world night` and `world down` on a running world: test_coalesce_restart.py, on its first world up.)"""

from __future__ import annotations

from cli_runner import run_cli


def test_refresh_without_a_token_names_the_variable(tmp_path):
    home = {"DAGSTER_HOME": str(tmp_path)}
    out = run_cli("coalesce", "refresh", cwd=tmp_path, env={**home, "COALESCE_ENVIRONMENT_IDS": "2"})
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "error: COALESCE_API_TOKEN: not set" in out.stderr
    out = run_cli("coalesce", "refresh", cwd=tmp_path, env=home)
    assert out.returncode == 2 and "workspace.environment_ids: empty" in out.stderr
    out = run_cli("coalesce", "refresh", cwd=tmp_path)
    assert out.returncode == 2 and "DAGSTER_HOME: not set" in out.stderr
