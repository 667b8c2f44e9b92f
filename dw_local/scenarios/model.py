"""The scenario file (``docs/scenarios.md``): a world, nights of events, and what should be detected.

```yaml
name: ecommerce-new-storefront-unmapped
world: ../../worlds/ecommerce/world.yaml   # a world file relative to this one, or: distributor
nights:
  - {}                                      # night 0: nothing happens
  - events:
      - {kind: new_key_unmapped, table: ORDER_LINES, column: STORE_ID, value: 7, fraction: 0.08}
    expect: {class: [value_loss], cause_keys: ["STORE_ID=7"]}
  - repair: true                            # the owners fixed what the faults broke, before this night
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
from pydantic import Field

from dw_dagster.config import DwConfigError, FileModel, load_yaml_model
from dw_dagster.incidents.models import CauseClass
from dw_local.scenarios.worlds import EventError, ScenarioWorld, open_world

MAX_NIGHTS = 14


class Expect(FileModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    incident: bool | None = Field(
        default=None, description="Should the night raise an incident? Default: yes when a fault is played."
    )
    classes: list[CauseClass] = Field(
        default_factory=list, alias="class", description="Diagnosis classes that name the cause correctly."
    )
    cause_keys: list[str] = Field(
        default_factory=list,
        description="Keys the diagnosis must name, as COLUMN=value (e.g. ORGANIZATION_ID=7120).",
    )


class Night(FileModel):
    events: list[dict[str, Any]] = Field(
        default_factory=list, description="Faults and benign events, each with kind."
    )
    repair: bool = Field(
        default=False,
        description="Before this night, the owners repair every persistent fault still in force and resolve "
        "the open incidents.",
    )
    expect: Expect = Field(default_factory=Expect)


class ScenarioFile(FileModel):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_\-]*$")
    description: str = ""
    world: str = Field(min_length=1, description="distributor, or a world file's path relative to this file.")
    nights: list[Night] = Field(min_length=1, max_length=MAX_NIGHTS)


class Scenario:
    """A validated scenario: the file, its world, and each night's events parsed against that world."""

    def __init__(self, path: Path, file: ScenarioFile, world: ScenarioWorld, events: list[list[Any]]):
        self.path, self.file, self.world, self.events = path, file, world, events

    @property
    def name(self) -> str:
        return self.file.name

    def night_index(self, k: int) -> int:
        """The world's night for the scenario's night ``k`` (the first after the seeded history)."""
        return self.world.history_nights + k

    def is_fault_night(self, k: int) -> bool:
        return any(not self.world.is_benign(e) for e in self.events[k])

    def expects_incident(self, k: int) -> bool:
        expect = self.file.nights[k].expect.incident
        return self.is_fault_night(k) if expect is None else expect


def load_scenario(path: Path) -> Scenario:
    """Reads and validates a scenario file and its world; every error names the file and the field."""
    path = Path(path).resolve()
    file = load_yaml_model(path, ScenarioFile, "scenario file", "the scenario's PATH")
    try:
        world = open_world(file.world, path.parent)
    except (ValueError, OSError) as e:  # the world, project, context or metrics file: named in the message
        raise DwConfigError(f"{path}: world: {e}") from None
    events: list[list[Any]] = []
    for k, night in enumerate(file.nights):
        parsed = []
        for j, raw_event in enumerate(night.events):
            try:
                parsed.append(world.parse_event(raw_event, world.history_nights))
            except EventError as e:
                kind = raw_event.get("kind", "?")
                raise DwConfigError(f"{path}: nights.{k}.events.{j} ({kind}): {e}") from None
        try:
            world.check_night(parsed)
        except EventError as e:
            raise DwConfigError(f"{path}: nights.{k}.events: {e}") from None
        events.append(parsed)
    scenario = Scenario(path, file, world, events)
    in_force: list[Any] = []  # persistent faults not yet repaired, as the runner keeps them
    for k, night in enumerate(file.nights):
        if night.repair:
            in_force = []
        faults = [e for e in events[k] if not world.is_benign(e)]
        if night.expect.incident and not (faults or in_force):
            raise DwConfigError(
                f"{path}: nights.{k}.expect.incident: true, but no fault is played that night or still in force "
                "from an earlier one: expected a fault among the night's events"
            )
        if scenario.expects_incident(k) and not night.expect.classes:
            raise DwConfigError(
                f"{path}: nights.{k}.expect.class: the night expects an incident: expected the diagnosis classes "
                "that name its cause (root-cause accuracy is scored on them)"
            )
        in_force = [e for e in [*in_force, *faults] if world.persists(e)]
    return scenario
