"""The errors of the Coalesce integration: each names the endpoint, the file or the field concerned."""

import copy
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from dagster.components.resolved.errors import ResolutionException
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

if TYPE_CHECKING:
    from dw_dagster.coalesce.run_models import CoalesceRunStatus


class CoalesceError(Exception):
    """Base class of the errors raised by the Coalesce client."""


def _gave_up(retries: int, why: str | None) -> str:
    """``; gave up after 2 retries: <why>`` (empty when the call was not retried and nothing cut it short)."""
    if not retries and not why:
        return ""
    tried = f" after {retries} {'retry' if retries == 1 else 'retries'}" if retries else ""
    return f"; gave up{tried}" + (f": {why}" if why else "")


class CoalesceAPIError(CoalesceError):
    """Coalesce answered with an error status; ``error_string`` and ``error_detail`` come from its body
    ``{"error": {"errorString": ..., "errorDetail": ...}}``.
    """

    def __init__(
        self,
        status: int,
        error_string: str,
        error_detail: str | None,
        endpoint: str,
        retries: int = 0,
        gave_up: str | None = None,
    ):
        self.status = status
        self.error_string = error_string
        self.error_detail = error_detail
        self.endpoint = endpoint
        self.retries = retries
        self.gave_up = gave_up
        message = f"Coalesce {endpoint} returned {status}: {error_string}"
        if error_detail:
            message += f" ({error_detail})"
        super().__init__(message + _gave_up(retries, gave_up))


class CoalesceConnectionError(CoalesceError):
    """Coalesce could not be reached, or did not answer in time."""

    def __init__(self, endpoint: str, reason: str, retries: int = 0, gave_up: str | None = None):
        self.endpoint = endpoint
        self.reason = reason
        self.retries = retries
        self.gave_up = gave_up
        super().__init__(f"Coalesce {endpoint} failed: {reason}" + _gave_up(retries, gave_up))


class CoalesceTimeoutError(CoalesceConnectionError):
    """Coalesce did not answer one request in time, and the call was not retried at the same size: the
    caller asks again for less (a smaller page of detailed nodes)."""


class CoalesceResponseError(CoalesceError):
    """A Coalesce response did not have the documented shape."""

    def __init__(self, endpoint: str, problems: Sequence[str]):
        self.endpoint = endpoint
        self.problems = list(problems)
        super().__init__(f"Malformed response from Coalesce {endpoint}: {'; '.join(self.problems)}")

    @classmethod
    def from_validation_error(cls, endpoint: str, error: ValidationError) -> "CoalesceResponseError":
        return cls(endpoint, describe_validation_errors(error))


class CoalesceRunTimeoutError(CoalesceError):
    """A Coalesce run did not reach a terminal status in time."""

    def __init__(self, run_id: int, timeout: float, last_status: "CoalesceRunStatus | None"):
        self.run_id = run_id
        self.timeout = timeout
        self.last_status = last_status
        super().__init__(
            f"Coalesce run {run_id} did not finish within {timeout:g} s "
            f"(last status: {last_status.value if last_status else 'unknown'})"
        )


class CoalesceConfigError(CoalesceError, ValueError):
    """The workspace is not configured enough to call Coalesce: a variable it reads is not set, or it names
    no environment."""


class CoalesceAttributeError(CoalesceConfigError, ResolutionException):
    """An attribute of the component in ``defs.yaml`` is invalid: the message names the file, the line and
    the attribute's path, and says what was expected. Dagster reports a ``ResolutionException`` raised by a
    resolver as it is (any other error it rewraps in the resolver's traceback)."""


class CoalesceStateError(CoalesceError, ValueError):
    """The workspace state (the node graph cached for loading) is missing, unreadable, or was fetched from
    another Coalesce than the one configured."""


def describe_validation_errors(error: ValidationError) -> list[str]:
    """One ``<field path>: <what was wrong> (got <value>)`` per problem, e.g. ``data[3].runStatus: ...``."""
    return [_describe(e) for e in error.errors(include_url=False)]


def _describe(error: ErrorDetails) -> str:
    path = _format_loc(error["loc"])
    if error["type"] == "missing":
        return f"{path}: field required"
    return f"{path}: {error['msg']} (got {_short_repr(error['input'])})"


def _format_loc(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else part)
    return path or "<body>"


def _short_repr(value: Any, limit: int = 80) -> str:
    # A whole response or state file can be the input: quote its start and say how much was left off.
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit:,} more characters)"


ModelT = TypeVar("ModelT", bound=BaseModel)


def parse_response(model: type[ModelT], payload: Any, endpoint: str) -> ModelT:
    """Validates a decoded response body, raising a :class:`CoalesceResponseError` naming
    ``endpoint`` (method and path) and each offending field.

    A ``null`` where the model has a default (a column's ``transform``, a join's ``joinCondition``, a node's
    ``overrideSQL``: fields Coalesce's OpenAPI description types without null, which a real response may
    still leave empty) reads as that default, with a warning naming the fields, rather than refusing the
    whole page. Only when every problem is such a null: a required field that is null, or any other
    problem, still refuses the response.
    """
    try:
        return model.model_validate(payload)
    except ValidationError as e:
        errors = e.errors(include_url=False)
        nulls = [err["loc"] for err in errors if err["input"] is None and err["type"] != "missing"]
        if not nulls or len(nulls) != len(errors):
            raise CoalesceResponseError.from_validation_error(endpoint, e) from e
        cleaned = copy.deepcopy(payload)
        if not all(_drop(cleaned, loc) for loc in nulls):
            raise CoalesceResponseError.from_validation_error(endpoint, e) from e
        try:
            parsed = model.model_validate(cleaned)
        except ValidationError:
            # A null in a field it cannot do without: the original problems say which.
            raise CoalesceResponseError.from_validation_error(endpoint, e) from e
        fields = ", ".join(_format_loc(loc) for loc in nulls[:5])
        more = f" and {len(nulls) - 5} more" if len(nulls) > 5 else ""
        logging.getLogger(__name__).warning(
            f"Coalesce {endpoint} sent null for {fields}{more}; read as the field's default"
        )
        return parsed


def _drop(payload: Any, loc: tuple[int | str, ...]) -> bool:
    """Removes the key ``loc`` points to, so that the field takes its default; False when ``loc`` is not a
    path in ``payload`` (a location inside a union, say)."""
    target = payload
    try:
        for part in loc[:-1]:
            target = target[part]
    except (KeyError, IndexError, TypeError):
        return False
    if not isinstance(target, dict) or loc[-1] not in target:
        return False
    del target[loc[-1]]
    return True
