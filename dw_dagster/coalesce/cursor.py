"""The run sensor's cursor: per environment, a high-water run id and the runs seen but not reported yet."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class CoalesceRunSensorError(Exception):
    """A tick could not make any progress (Coalesce unreachable, a run that cannot be read, a cursor that
    cannot be read); its cursor is unchanged, so the next tick retries the same work."""


class EnvironmentCursor(BaseModel):
    """Where the sensor stands in one environment."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    high_water: int = Field(
        ge=0,
        description="Every refresh run of the environment with an id up to this one has been seen: it was "
        "reported, or it is in `pending`. Runs are listed ordered by id, from this one (exclusive).",
    )
    pending: tuple[int, ...] = Field(
        default=(),
        description="Runs seen but not reported: unfinished when last looked at, or whose report failed. "
        "Each tick looks at them again; a run leaves this list only once reported.",
    )


class CoalesceRunSensorCursor(BaseModel):
    """The sensor's cursor: JSON in ``SensorResult(cursor=...)``, stored by the daemon with the tick.

    A tick's result carries the cursor of exactly the work it reported, and nothing is stored when a tick
    fails or is killed, so the next tick resumes from the last stored cursor.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    environments: dict[str, EnvironmentCursor] = Field(default_factory=dict)

    @classmethod
    def parse(cls, raw: str | None) -> CoalesceRunSensorCursor:
        if not raw:
            return cls()
        try:
            return cls.model_validate_json(raw)
        except ValidationError as e:
            # Starting over would silently skip every run since: refuse, and say how to start over.
            raise CoalesceRunSensorError(
                f"Cannot read the Coalesce run sensor's cursor {raw[:200]!r}: {e}. Clear the cursor in the "
                "Dagster UI to start from the present (runs finished meanwhile are not reported), or set it "
                'to {"environments": {"<environment id>": {"high_water": <last reported run id>}}}.'
            ) from None

    def serialize(self) -> str:
        return self.model_dump_json()
