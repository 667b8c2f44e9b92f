"""The load's shortcuts give what the long way gives: the state read from its bytes is the state read from its
text (and a broken one is refused in the same words), and the component's ``defs.yaml`` code references,
made once per file and line, are Dagster's own. ``test_load_snapshot.py`` checks the whole load's asset
nodes; these check each shortcut on more than its one workspace."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
from coalesce_state import bench_load_definitions
from dagster.components.component.component import Component
from dagster_shared.yaml_utils.source_position import LineCol, SourcePosition

from dw_dagster.coalesce.component import CoalesceComponent
from dw_dagster.coalesce.errors import CoalesceStateError
from dw_dagster.coalesce.state import CoalesceEnvironmentData, CoalesceWorkspaceData
from dw_dagster.coalesce.workspace_models import CoalesceEnvironment, CoalesceJob, CoalesceNode


def _accented() -> str:
    """Another shape: names and descriptions beyond ASCII, a job by name, a second environment."""
    nodes = [
        CoalesceNode.model_validate(
            {
                "id": f"n{i}",
                "name": f"CAFÉ_{i}",
                "nodeType": "Stage",
                "locationName": "MÜNCHEN",
                "description": "Umsätze je Filiale — täglich",
                "metadata": {"columns": [{"columnID": f"c{i}", "name": "PREIS_€", "dataType": "NUMBER"}]},
            }
        )
        for i in range(3)
    ]
    return CoalesceWorkspaceData(
        base_url="https://app.eu.coalescesoftware.io",
        fetched_at=datetime(2026, 12, 1, tzinfo=UTC),
        environments=[
            CoalesceEnvironmentData(
                environment=CoalesceEnvironment(id=str(e), name=f"ENV_{e}"),
                nodes=nodes,
                jobs=[CoalesceJob(id="4", name="täglich", include_selector="{location: MÜNCHEN}")],
            )
            for e in (2, 5)
        ],
    ).serialize()


@pytest.mark.parametrize(
    "text",
    [bench_load_definitions().synthetic_workspace(12).serialize(), _accented()],
    ids=["synthetic", "accented"],
)
def test_the_state_read_from_its_bytes_is_the_state_read_from_its_text(text: str) -> None:
    from_text = CoalesceWorkspaceData.parse(text, "state")
    assert CoalesceWorkspaceData.parse(text.encode(), "state") == from_text


@pytest.mark.parametrize(
    "text",
    [bench_load_definitions().synthetic_workspace(12).serialize(), _accented()],
    ids=["synthetic", "accented"],
)
def test_a_broken_state_is_refused_in_the_same_words_from_its_bytes(text: str) -> None:
    for broken in (text[: len(text) // 2], text.replace('"environments"', '"environment_list"')):
        with pytest.raises(CoalesceStateError) as from_text:
            CoalesceWorkspaceData.parse(broken, "Coalesce state k")
        with pytest.raises(CoalesceStateError) as from_bytes:
            CoalesceWorkspaceData.parse(broken.encode(), "Coalesce state k")
        assert str(from_bytes.value) == str(from_text.value)


@pytest.mark.parametrize(
    "text",
    [bench_load_definitions().synthetic_workspace(12).serialize(), _accented()],
    ids=["synthetic", "accented"],
)
def test_a_state_file_that_is_not_utf8_is_refused_with_the_refresh_hint(text: str) -> None:
    """A state file whose bytes are not UTF-8 (a byte of Latin-1 among them, a multibyte character cut) is
    refused as any broken state is, naming where it came from and the byte, not with a UnicodeDecodeError
    nor read with the byte replaced."""
    raw = text.encode()
    middle = len(raw) // 2
    for broken, at in ((raw[:middle] + b"\xe9" + raw[middle:], middle), (raw[:-1] + b"\xc3", len(raw) - 1)):
        with pytest.raises(CoalesceStateError) as refused:
            CoalesceWorkspaceData.parse(broken, "Coalesce state k")
        assert str(refused.value).startswith(f"Coalesce state k: not UTF-8 at byte {at} ")
        assert "dw-dagster coalesce refresh" in str(refused.value)


@pytest.mark.parametrize(
    ("yaml_path", "line"), [(Path("/project/defs/coalesce/defs.yaml"), 1), (Path("/elsewhere/defs.yaml"), 17)]
)
def test_the_components_code_references_are_dagsters_own_made_once(yaml_path: Path, line: int) -> None:
    position = SourcePosition(str(yaml_path), LineCol(line, 0), LineCol(line + 9, 0))
    expected = Component.get_code_references_for_yaml.__func__(CoalesceComponent, yaml_path, position, None)
    first = CoalesceComponent.get_code_references_for_yaml(yaml_path, position, None)  # type: ignore[arg-type]
    assert (
        list(first)
        == list(expected)
        == [dg.LocalFileCodeReference(file_path=str(yaml_path), line_number=line)]
    )
    again = CoalesceComponent.get_code_references_for_yaml(yaml_path, position, None)  # type: ignore[arg-type]
    assert again is first
    other = SourcePosition(str(yaml_path), LineCol(line + 40, 0), LineCol(line + 41, 0))
    assert CoalesceComponent.get_code_references_for_yaml(yaml_path, other, None) == (  # type: ignore[arg-type]
        dg.LocalFileCodeReference(file_path=str(yaml_path), line_number=line + 40),
    )
