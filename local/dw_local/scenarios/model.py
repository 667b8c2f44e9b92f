"""The scenario file (``docs/scenarios.md``): a world, nights of events, and what should be detected.

```yaml
name: ecommerce-new-storefront-unmapped
world: ../../worlds/ecommerce/world.yaml   # a world file relative to this one, or: distributor
before:                                     # played first, not scored: what is open when night 0 starts
  - events: [{kind: reference_row_deleted, table: STORE_MAP, where: {STORE_ID: 3}}]
nights:
  - {}                                      # night 0: nothing happens
  - events:
      - {kind: new_key_unmapped, table: ORDER_LINES, column: STORE_ID, value: 7, fraction: 0.08}
    expect: {class: [value_loss], cause_keys: ["STORE_ID=7"], joins: false}   # its own incident
  - repair: true                            # the owners fixed what the faults broke, before this night
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pydantic
from pydantic import Field

from dw_dagster.config import DwConfigError, FileModel, load_yaml_model
from dw_dagster.records.incidents import CauseClass
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
    joins: bool | None = Field(
        default=None,
        description="true: the night's findings continue an incident open from an earlier night (a reply in "
        "its thread, no new incident); false: a new incident must open, even with one open on the same "
        "tables. Default: not scored.",
    )
    max_severity: Literal["WARN"] | None = Field(
        default=None,
        description="WARN: the night may raise WARN findings (reported apart) but nothing above; only what "
        "exceeds it is a false alarm. Default: any finding on an unrelated table is one.",
    )


class EarlierNight(FileModel):
    events: list[dict[str, Any]] = Field(
        default_factory=list, description="Faults and benign events, each with kind."
    )
    repair: bool = Field(
        default=False,
        description="Before this night, the owners repair every persistent fault still in force.",
    )


class Night(EarlierNight):
    expect: Expect = Field(default_factory=Expect)


class ScenarioFile(FileModel):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_\-]*$")
    description: str = ""
    world: str = Field(min_length=1, description="distributor, or a world file's path relative to this file.")
    before: list[EarlierNight] = Field(
        default_factory=list,
        max_length=MAX_NIGHTS,
        description="Nights played before night 0 and not scored: what is open when the scenario starts "
        "(an incident from an earlier night).",
    )
    nights: list[Night] = Field(min_length=1, max_length=MAX_NIGHTS)


class Scenario:
    """A validated scenario: the file, its world, and each night's events parsed against that world
    (``before``: the earlier nights' events)."""

    def __init__(
        self, path: Path, file: ScenarioFile, world: ScenarioWorld, events: list[list[Any]],
        before: list[list[Any]] | None = None,
    ):  # fmt: skip
        self.path, self.file, self.world, self.events = path, file, world, events
        self.before = before or []

    @property
    def name(self) -> str:
        return self.file.name

    def night_index(self, k: int) -> int:
        """The world's night for the scenario's night ``k`` (the first after the seeded history and the
        earlier nights); ``k`` is negative for an earlier night (-1: the last one)."""
        return self.world.history_nights + len(self.file.before) + k

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
    # Event parameters that name nights (since_night) count from night 0, after the earlier nights.
    first_night = world.history_nights + len(file.before)

    def parse(field: str, nights: list[EarlierNight]) -> list[list[Any]]:
        out = []
        for k, night in enumerate(nights):
            parsed = []
            for j, raw_event in enumerate(night.events):
                try:
                    parsed.append(world.parse_event(raw_event, first_night))
                except EventError as e:
                    kind = raw_event.get("kind", "?")
                    raise DwConfigError(f"{path}: {field}.{k}.events.{j} ({kind}): {e}") from None
            try:
                world.check_night(parsed)
            except EventError as e:
                raise DwConfigError(f"{path}: {field}.{k}.events: {e}") from None
            out.append(parsed)
        return out

    before = parse("before", list(file.before))
    events = parse("nights", list(file.nights))
    scenario = Scenario(path, file, world, events, before)
    in_force: list[Any] = []  # persistent faults not yet repaired, as the runner keeps them
    faulted = False  # an earlier night played a fault: an incident tonight's may continue
    for k, (night, played) in enumerate(zip(file.before, before, strict=True)):
        in_force = _repaired(path, f"before.{k}", world, in_force) if night.repair else in_force
        faults = [e for e in played if not world.is_benign(e)]
        faulted = faulted or bool(faults)
        in_force = [e for e in [*in_force, *faults] if world.persists(e)]
    for k, night in enumerate(file.nights):
        if night.repair:
            in_force = _repaired(path, f"nights.{k}", world, in_force)
        faults = [e for e in events[k] if not world.is_benign(e)]
        where = f"{path}: nights.{k}.expect"
        if night.expect.incident and not (faults or in_force):
            raise DwConfigError(
                f"{where}.incident: true, but no fault is played that night or still in force from an earlier "
                "one: expected a fault among the night's events"
            )
        expects = scenario.expects_incident(k)
        if expects and not night.expect.classes:
            raise DwConfigError(
                f"{where}.class: the night expects an incident: expected the diagnosis classes that name its "
                "cause (root-cause accuracy is scored on them)"
            )
        if night.expect.joins is not None and not expects:
            raise DwConfigError(
                f"{where}.joins: the night expects no incident: expected joins only on a night with a fault "
                "played or still in force"
            )
        if night.expect.joins and not faulted:
            raise DwConfigError(
                f"{where}.joins: true, but no earlier night (nor `before`) played a fault: expected an "
                "incident open from an earlier night for this one to continue"
            )
        if night.expect.max_severity and expects:
            raise DwConfigError(
                f"{where}.max_severity: the night expects an incident (a fault is played or in force): expected "
                "max_severity only on a night that must raise nothing above it"
            )
        faulted = faulted or bool(faults)
        in_force = [e for e in [*in_force, *faults] if world.persists(e)]
    return scenario


def _repaired(path: Path, where: str, world: ScenarioWorld, in_force: list[Any]) -> list[Any]:
    """Nothing stays in force after a repair, which must be one the world can play: a fault whose rows stay
    in an append source (``stays_in``) is repaired only by a world that reloads them."""
    lasting = [e.kind for e in in_force if e.stays_in and not e.persists]
    if lasting and not world.repairs_rows:
        raise DwConfigError(
            f"{path}: {where}.repair: {lasting[0]} stays_in nodes with its rows, and world {world.name} cannot "
            "reload an append source's rows: expected no repair while it is in force"
        )
    return []
