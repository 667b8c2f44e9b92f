"""Configuration that could open a hole by accident is refused when the code location loads.

Each typo of issue #11 is played on two worlds (the distributor and the e-commerce retailer): the node graph
comes from the Coalesce simulator serving the world's project over HTTP, refreshed into a Dagster instance's
definitions state by ``refresh_coalesce_state`` as production does; then ``build_definitions`` loads the
world's context and metrics files with one thing broken, and must fail naming the file, the field (or the
line) and what was expected.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest
import yaml
from coalesce_state import environ, state_key, write_state_text

from dw_dagster.app.components import asset_specs_of, check_defs_files
from dw_dagster.app.definitions import load_definitions
from dw_dagster.app.project import refresh_coalesce_state
from dw_dagster.coalesce.errors import CoalesceAttributeError, CoalesceStateError
from dw_dagster.coalesce.metadata import coalesce_specs
from dw_dagster.config import QUOTE_LIMIT, DwConfigError
from dw_dagster.context.models import load_context_file
from dw_local.world import DISTRIBUTOR_DIR, LOCAL_COALESCE_TOKEN, LocalWorld

ECOMMERCE_DIR = (
    Path(__file__).resolve().parents[2] / "local" / "dw_local" / "scenarios" / "worlds" / "ecommerce"
)
WORLDS = {"distributor": DISTRIBUTOR_DIR, "ecommerce": ECOMMERCE_DIR}


class World:
    def __init__(self, folder: Path, instance: dg.DagsterInstance, base_url: str, work: Path):
        self.folder = folder
        self.instance = instance
        self.base_url = base_url
        self.work = work
        self.context = yaml.safe_load((folder / "context.yaml").read_text())
        self.metrics = yaml.safe_load((folder / "metrics.yaml").read_text())
        self.specs = {s.key.to_user_string(): s for s in asset_specs_of(self.load())}  # its own files load

    def files(
        self, context: dict | str | None = None, metrics: dict | str | None = None
    ) -> tuple[Path, Path]:
        out = []
        for name, value, original in (("context", context, self.context), ("metrics", metrics, self.metrics)):
            path = self.work / f"{name}.yaml"
            text = (
                value if isinstance(value, str) else yaml.safe_dump(value if value is not None else original)
            )
            path.write_text(text)
            out.append(path)
        return out[0], out[1]

    def env(self, context_path: Path | None = None, metrics_path: Path | None = None) -> dict[str, str]:
        return {
            "DW_CONTEXT_FILE": str(context_path or self.folder / "context.yaml"),
            "DW_METRICS_FILE": str(metrics_path or self.folder / "metrics.yaml"),
            "SNOWFLAKE_DATABASE": "DW_PROD",
            "COALESCE_BASE_URL": self.base_url,
            "COALESCE_ENVIRONMENT_IDS": "2",
        }

    def load(self, context: dict | str | None = None, metrics: dict | str | None = None) -> dg.Definitions:
        with environ(self.env(*self.files(context, metrics))):
            return load_definitions(self.instance)

    def refused(self, error: type[Exception] = DwConfigError, **files) -> str:
        """The message of the ``error`` loading raised: Dagster names the component that failed, the error
        it was raised from names the file and the field."""
        with pytest.raises(Exception) as e:
            self.load(**files)
        cause = e.value
        while not isinstance(cause, error) and cause.__cause__ is not None:
            cause = cause.__cause__
        assert isinstance(cause, error), e.value
        return str(cause)

    def state_key(self) -> str:
        with environ(self.env()):
            return state_key()

    def copy(self) -> tuple[dict, dict]:
        context, metrics = json.loads(json.dumps(self.context)), json.loads(json.dumps(self.metrics))
        if not context.get("reference_tables"):
            # A world without one gets the table its hand-kept spreadsheet feeds, keyed on its first column.
            sheet = next(s for s in context["systems"] if s["kind"] == "spreadsheet")
            context["reference_tables"] = [
                {"asset": sheet["feeds"][0], "key_column": self.first_column(sheet["feeds"][0])}
            ]
        return context, metrics

    def first_column(self, asset: str) -> str:
        """The first column of the node behind ``asset``, as the Coalesce state gives it."""
        return self.specs[asset].metadata["dagster/column_schema"].columns[0].name


@pytest.fixture(scope="module", params=sorted(WORLDS))
def world(request, tmp_path_factory) -> World:
    folder = WORLDS[request.param]
    root = tmp_path_factory.mktemp(request.param)
    (home := root / "dagster_home").mkdir()
    instance = dg.DagsterInstance.from_config(str(home))
    with LocalWorld(
        root / "local", project_file=folder / "project.yaml", services=("snowflake", "coalesce")
    ) as lw:
        env = {
            "COALESCE_BASE_URL": lw.coalesce_url,
            "COALESCE_ENVIRONMENT_IDS": "2",
            "COALESCE_API_TOKEN": LOCAL_COALESCE_TOKEN,
        }
        with environ(env):
            refresh_coalesce_state(instance)
        world = World(folder, instance, lw.coalesce_url, root)
    return world


def _first_team_block(text: str, team: str) -> str:
    """The ``  <team>:`` block of the context file's teams, as written (comments and all)."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.rstrip() == f"  {team}:")
    end = next(
        i
        for i in range(start + 1, len(lines))
        if lines[i].startswith("  ") and not lines[i].startswith("   ")
    )
    return "".join(lines[start:end])


def test_a_duplicated_team_block_is_refused_naming_file_line_and_key(world: World):
    """The issue's hole: a second ``planning-ops:`` block silently replaced the team and its approvers."""
    text = (world.folder / "context.yaml").read_text()
    team = next(r["owners"][0] for r in world.context["coalesce_owners"] if r["match"].startswith("ref_"))
    block = _first_team_block(text, team)
    stranger = f'  {team}:\n    name: Someone else\n    slack_channel: "#elsewhere"\n    members:\n      - {{name: Mallory, email: mallory@example.com}}\n'
    broken = text.replace(block, block + stranger, 1)
    line = broken[: broken.index(stranger)].count("\n") + 1
    message = world.refused(context=broken)
    assert f"context.yaml: line {line}: duplicate key {team!r}" in message
    assert f"first given on line {broken[: broken.index(block)].count(chr(10)) + 1}" in message


def test_duplicate_keys_anywhere_in_the_metrics_file_are_refused(world: World):
    text = (world.folder / "metrics.yaml").read_text()
    broken = text.replace("totals:\n", "ops_schema: DW_OTHER\ntotals:\n", 1)
    message = world.refused(metrics=broken)
    assert "metrics.yaml: line" in message and "duplicate key 'ops_schema'" in message


def test_a_metrics_total_owned_by_an_unknown_team_is_refused(world: World):
    context, metrics = world.copy()
    metrics["totals"][0]["owner"] = metrics["totals"][0]["owner"] + "s"
    message = world.refused(metrics=metrics)
    assert f"metrics.yaml: totals[0] ({metrics['totals'][0]['name']}).owner: unknown team" in message


def test_a_metrics_total_on_a_misspelt_asset_is_refused_not_a_phantom_check(world: World):
    context, metrics = world.copy()
    real = metrics["totals"][0]["asset"]
    metrics["totals"][0]["asset"] = real.replace("/", "s/", 1)
    message = world.refused(metrics=metrics)
    assert (
        f"totals[0] ({metrics['totals'][0]['name']}).asset: no asset {metrics['totals'][0]['asset']!r}"
        in message
    )
    assert f"did you mean {real!r}" in message


def test_a_ref_in_a_total_that_names_no_node_is_refused(world: World):
    context, metrics = world.copy()
    metrics["totals"][0]["sql"] = metrics["totals"][0]["sql"].replace("ref('", "ref('X", 1)
    message = world.refused(metrics=metrics)
    assert "totals[0]" in message and ".sql: ref('X" in message and "no such Coalesce node" in message


def test_a_reference_table_on_a_misspelt_asset_is_refused(world: World):
    context, metrics = world.copy()
    world.load(context=context)  # as written, it loads
    context["reference_tables"][0]["asset"] += "s"
    message = world.refused(context=context)
    assert "context.yaml: reference_tables[0]" in message and ".asset: no asset" in message


def test_a_reference_table_key_column_not_in_the_table_is_refused(world: World):
    context, metrics = world.copy()
    context["reference_tables"][0]["key_column"] += "_ID"
    message = world.refused(context=context)
    assert (
        "reference_tables[0]" in message
        and ".key_column:" in message
        and "not among the table's columns" in message
    )


def test_an_owner_rule_that_matches_no_asset_is_refused(world: World):
    """A misspelt rule hands the table to the next rule's team: other people would approve its changes."""
    context, metrics = world.copy()
    rule = next(i for i, r in enumerate(context["coalesce_owners"]) if r["match"] != "*")
    context["coalesce_owners"][rule]["match"] = "x" + context["coalesce_owners"][rule]["match"]
    message = world.refused(context=context)
    assert (
        f"context.yaml: coalesce_owners[{rule}].match:" in message and "matches no Coalesce asset" in message
    )


def test_an_unknown_owner_team_in_the_context_file_is_refused(world: World):
    context, metrics = world.copy()
    context["coalesce_owners"][0]["owners"] = ["nobody-team"]
    message = world.refused(context=context)
    assert "coalesce_owners[0].owners: unknown team 'nobody-team'" in message and "context.yaml" in message


def test_a_four_field_cron_is_refused_in_both_files(world: World):
    context, metrics = world.copy()
    system = next(i for i, s in enumerate(context["systems"]) if s.get("reads"))
    context["systems"][system]["reads"][0]["cron"] = "0 9 * 1-5"
    message = world.refused(context=context)
    assert f"context.yaml: systems.{system}.reads.0.cron: Value error, expected a five-field cron" in message
    context, metrics = world.copy()
    job = next(iter(metrics["freshness"]["schedules"]))
    metrics["freshness"]["schedules"][job]["cron"] = "0 2 * *"
    message = world.refused(metrics=metrics)
    assert f"metrics.yaml: freshness.schedules.{job}.cron: Value error, expected a five-field cron" in message


def test_one_slack_user_id_for_two_people_is_refused(world: World):
    context, metrics = world.copy()
    teams = list(context["teams"].values())
    teams[1]["members"][0]["slack_user_id"] = teams[0]["members"][0]["slack_user_id"]
    message = world.refused(context=context)
    assert "names two different people" in message and teams[0]["members"][0]["slack_user_id"] in message


def test_a_freshness_schedule_for_a_job_that_does_not_exist_is_refused(world: World):
    context, metrics = world.copy()
    job = next(iter(metrics["freshness"]["schedules"]))
    metrics["freshness"]["schedules"][job + "_typo"] = metrics["freshness"]["schedules"].pop(job)
    message = world.refused(metrics=metrics)
    assert f"freshness.schedules.{job}_typo: no Coalesce job" in message


def test_every_problem_is_reported_at_once(world: World):
    context, metrics = world.copy()
    metrics["totals"][0]["asset"] += "x"
    context["reference_tables"][0]["asset"] += "x"
    message = world.refused(context=context, metrics=metrics)
    assert "metrics.yaml: totals[0]" in message and "context.yaml: reference_tables[0]" in message


def test_a_truncated_state_error_quotes_a_few_hundred_characters(world: World):
    key = world.state_key()
    good = write_state_text(world.instance, key, lambda text: text[: len(text) // 2])
    try:
        message = world.refused(CoalesceStateError)
    finally:
        world.instance.defs_state_storage.set_latest_version(key, good)
    assert f"Coalesce state {key}" in message and "Invalid JSON" in message
    assert len(message) < QUOTE_LIMIT + 600, "the error quotes a part of the input, not all of it"
    assert "more characters" in message


def test_the_context_file_loader_names_the_line_of_a_duplicate_member_key(tmp_path: Path):
    path = tmp_path / "context.yaml"
    path.write_text(
        "teams:\n  ops:\n    name: Ops\n    slack_channel: '#ops'\n    members:\n"
        "      - {name: A, email: a@x.example, email: b@x.example}\n"
    )
    with pytest.raises(DwConfigError, match=r"context.yaml: line 6: duplicate key 'email'"):
        load_context_file(path)


# -- SQL in the files: exactly one statement that only reads, checked by sqlglot when the file loads -------


def test_a_second_statement_in_a_draft_sql_is_refused_naming_file_and_field(world: World):
    """The issue's hole: ``...; DELETE FROM X`` in a context file's draft_sql loaded, and would have run with
    the code location's role when a key went missing."""
    context, metrics = world.copy()
    ref = context["reference_tables"][0]
    ((_, node),) = coalesce_specs([world.specs[ref["asset"]]])
    table = f"{{{{ ref('{node.location}', '{node.node_name}') }}}}"
    ref["draft_sql"] = f'SELECT "{ref["key_column"]}" FROM {table} WHERE "{ref["key_column"]}" = %(key)s'
    world.load(context=context)  # one SELECT with a bound key loads
    ref["draft_sql"] += "; DELETE FROM X"
    message = world.refused(context=context)
    assert "context.yaml: reference_tables.0.draft_sql: Value error, expected one read-only SELECT" in message
    assert "got 2 statements" in message


def test_a_write_or_a_system_call_disguised_as_a_select_is_refused_in_both_files(world: World):
    context, metrics = world.copy()
    context["reference_tables"][0]["draft_sql"] = "SELECT * INTO STOLEN FROM X WHERE K = %(key)s"
    message = world.refused(context=context)
    assert "reference_tables.0.draft_sql" in message and "SELECT ... INTO creates a table" in message
    context, metrics = world.copy()
    metrics["totals"][0]["sql"] = 'SELECT SYSTEM$ABORT_SESSION(1) AS "VALUE"'
    message = world.refused(metrics=metrics)
    assert "metrics.yaml: totals.0.sql" in message and "it calls SYSTEM$ABORT_SESSION" in message


def test_a_total_that_is_not_valid_snowflake_sql_is_refused_at_load_not_at_night(world: World):
    context, metrics = world.copy()
    metrics["totals"][0]["sql"] = metrics["totals"][0]["sql"].replace("SELECT", "SELECT SUM(", 1)
    message = world.refused(metrics=metrics)
    assert "metrics.yaml: totals.0.sql" in message and "not valid Snowflake SQL at line" in message


# -- defs.yaml: the components' attributes, refused naming the file, the line and the attribute ----------

DEFS = Path(__file__).resolve().parents[2] / "dw_dagster" / "app" / "defs"
COALESCE_DEFS = DEFS / "coalesce" / "defs.yaml"


def _refused_in_defs(world: World, **env: str) -> str:
    """The message of the error loading raised with ``env`` over the world's, from the component's error
    up (Dagster's own exception only names the component)."""
    with pytest.raises(Exception) as e, environ({**world.env(), **env}):
        load_definitions(world.instance)
    cause = e.value
    while not isinstance(cause, CoalesceAttributeError) and cause.__cause__ is not None:
        cause = cause.__cause__
    assert isinstance(cause, CoalesceAttributeError), e.value
    return str(cause)


def test_a_coalesce_base_url_without_a_scheme_is_refused_naming_defs_yaml_and_the_attribute(world: World):
    message = _refused_in_defs(world, COALESCE_BASE_URL="app.coalescesoftware.io")
    line = (
        COALESCE_DEFS.read_text()
        .splitlines()
        .index(next(x for x in COALESCE_DEFS.read_text().splitlines() if "base_url:" in x))
    )
    assert (
        f"{COALESCE_DEFS}:{line + 1}: attributes.workspace.base_url: expected the Coalesce host as an https URL"
        in message
    )
    assert "got 'app.coalescesoftware.io'" in message
    # The token goes with every call: plain http only to this machine.
    message = _refused_in_defs(world, COALESCE_BASE_URL="http://coalesce.example.com")
    assert "attributes.workspace.base_url: expected https" in message


def test_a_coalesce_environment_id_that_is_not_a_number_is_refused_naming_defs_yaml(world: World):
    message = _refused_in_defs(world, COALESCE_ENVIRONMENT_IDS="2,PROD")
    assert f"{COALESCE_DEFS}:" in message and "attributes.workspace.environment_ids:" in message
    assert "not ids: ['PROD']" in message


def _defs_copy(tmp_path: Path, edit) -> Path:
    folder = tmp_path / "defs"
    shutil.copytree(DEFS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    path = folder / "coalesce" / "defs.yaml"
    path.write_text(edit(path.read_text()))
    return folder


def test_a_key_given_twice_in_defs_yaml_is_refused_naming_file_and_line(tmp_path: Path):
    """Dagster keeps the last of two keys: a second base_url would quietly send the token elsewhere."""
    check_defs_files(DEFS)  # the product's own files pass
    folder = _defs_copy(tmp_path, lambda text: text.replace(
        "    api_token_env_var:", "    base_url: https://elsewhere.example\n    api_token_env_var:", 1))  # fmt: skip
    with pytest.raises(DwConfigError) as e:
        check_defs_files(folder)
    lines = (folder / "coalesce" / "defs.yaml").read_text().splitlines()
    second = lines.index("    base_url: https://elsewhere.example") + 1
    assert f"coalesce/defs.yaml: line {second}: duplicate key 'base_url' (first given on line" in str(e.value)


def test_an_unknown_component_type_is_refused_naming_file_and_field(tmp_path: Path):
    folder = _defs_copy(tmp_path, lambda text: text.replace("CoalesceComponent", "CoalesceComponnt", 1))
    with pytest.raises(DwConfigError) as e:
        check_defs_files(folder)
    assert (
        f"{folder / 'coalesce' / 'defs.yaml'}: type: no component 'dw_dagster.coalesce.CoalesceComponnt'"
        in str(e.value)
    )
    assert "did you mean dw_dagster.coalesce.CoalesceComponent?" in str(e.value)
