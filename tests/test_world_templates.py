"""The whole suite builds its world templates before its tests (tests/world_templates.py, conftest's
pytest_sessionstart); a file run alone seeds lazily."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from world_templates import REPO, SCORED_ONLY, build_all, builds_first, templates, world_files

from dw_local.scenarios.world_file import load_world_file
from dw_local.seeding import HISTORY_NIGHTS


def test_every_world_file_a_test_plays_and_the_distributor_is_built_longest_first():
    found = templates()
    files = {
        *(REPO / "local" / "dw_local" / "scenarios" / "worlds").glob("*/world.yaml"),
        *(REPO / "tests").rglob("world.yaml"),
    }
    scored_only = {REPO / name / "world.yaml" for name in SCORED_ONLY}
    assert scored_only <= files, "each world left out exists"
    assert set(world_files().values()) == files - scored_only and len(files - scored_only) >= 4
    assert set(found) == {"distributor", *world_files()}
    assert found["distributor"] == HISTORY_NIGHTS
    assert all(found[name] == load_world_file(path).history_nights for name, path in world_files().items())
    assert list(found.values()) == sorted(found.values(), reverse=True)


def test_a_failed_build_names_the_world_and_its_error(tmp_path: Path):
    cache = tmp_path / "not-a-folder"
    cache.write_text("")
    lines: list[str] = []
    with pytest.raises(RuntimeError) as err:
        build_all(cache, 1, lines.append, only=["tests/scenarios/billing"])
    assert "building the world template tests/scenarios/billing failed" in str(err.value)
    assert "Error" in str(err.value)  # the build's own traceback, last lines
    assert len(lines) == 1 and "tests/scenarios/billing (6 nights): FAILED after" in lines[0]


def _config(args_source, markexpr="", collectonly=False, worker=False, keyword=""):
    config = SimpleNamespace(
        args_source=args_source,
        option=SimpleNamespace(markexpr=markexpr, collectonly=collectonly, keyword=keyword),
    )
    if worker:
        config.workerinput = {}
    return config


@pytest.mark.parametrize(
    "config, builds",
    [
        (_config(pytest.Config.ArgsSource.TESTPATHS), True),
        (_config(pytest.Config.ArgsSource.TESTPATHS, markexpr="world"), True),
        (_config(pytest.Config.ArgsSource.TESTPATHS, markexpr="not world"), False),
        (_config(pytest.Config.ArgsSource.ARGS), False),  # a file or folder named: lazy
        (_config(pytest.Config.ArgsSource.TESTPATHS, keyword="diagnosis"), False),
        (_config(pytest.Config.ArgsSource.TESTPATHS, collectonly=True), False),
        (_config(pytest.Config.ArgsSource.TESTPATHS, worker=True), False),  # the controller built them
    ],
)
def test_only_the_whole_suite_builds_first(config, builds, monkeypatch):
    monkeypatch.delenv("DW_PREBUILD_TEMPLATES", raising=False)
    assert builds_first(config) is builds
    monkeypatch.setenv("DW_PREBUILD_TEMPLATES", "0")
    assert builds_first(config) is False
    monkeypatch.setenv("DW_PREBUILD_TEMPLATES", "1")
    # Forced on for the controller of any run; a worker (it inherits the variable) or --co never builds.
    assert builds_first(config) is not (hasattr(config, "workerinput") or config.option.collectonly)


def test_what_running_the_code_leaves_beside_it_does_not_change_the_templates_key(tmp_path: Path):
    """Dagster's ``LOCAL_FILESYSTEM`` state lands under the defs folder when a test loads the component tree
    from the checkout; counted, it changed every template's key halfway through the suite."""
    import uuid

    from dw_local.seeding import _PRODUCT_DIR, _shaping_hash, shaping_files

    before, key = shaping_files(), _shaping_hash()
    state = _PRODUCT_DIR / "app" / "defs" / ".local_defs_state" / f"test-{uuid.uuid4().hex}"
    stray = _PRODUCT_DIR / "checks" / f".{uuid.uuid4().hex}.swp"
    try:
        state.mkdir(parents=True)
        (state / "state").write_text("{}")
        stray.write_text("an editor's file")
        assert shaping_files() == before and _shaping_hash() == key
    finally:
        stray.unlink(missing_ok=True)
        (state / "state").unlink(missing_ok=True)
        state.rmdir()
    assert "dw_dagster/app/defs/coalesce/defs.yaml" in before and "dw_local/seeding.py" in before
