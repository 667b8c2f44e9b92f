"""The HTTP side of the Coalesce client: one authenticated httpx client to one host, each call retried
within a time budget (backoff, ``Retry-After``, never a second start of a run), Coalesce's error body raised
as :class:`~dw_dagster.coalesce.errors.CoalesceAPIError`, a response validated into its model, and a list
endpoint followed page by page.

The endpoints themselves are :class:`~dw_dagster.coalesce.client.CoalesceClient`'s.
"""

import functools
import logging
import os
import ssl
import time
from collections.abc import Iterator, Mapping
from typing import Any, Self, TypeVar

import httpx
from dagster import get_dagster_logger
from pydantic import BaseModel

from dw_dagster.coalesce.errors import (
    CoalesceAPIError,
    CoalesceConnectionError,
    CoalesceResponseError,
    CoalesceTimeoutError,
    parse_response,
)
from dw_dagster.coalesce.models import COALESCE_DEFAULT_BASE_URL, CoalesceErrorBody, CoalescePage

ModelT = TypeVar("ModelT", bound=BaseModel)

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
# A gateway's answer to a request that took too long: for a call that shrinks on timeouts, a timeout too.
GATEWAY_TIMEOUT = 504
# A request that starts a run is repeated only when the server surely did not act on it: a 500, 502 or
# 504 (or a lost answer) may come after the run was started, and a second start would build twice.
NOT_PROCESSED_STATUSES = frozenset({429, 503})

# A 429's Retry-After is honoured up to this many seconds: Coalesce has asked for 25 s, and three such waits
# took one sensor tick past the daemon's 60 s limit.
MAX_RETRY_WAIT = 10.0
DEFAULT_REQUEST_BUDGET = 30.0


@functools.cache
def _tls_context(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    # httpx reads the CA bundle into a new context for every client (tens of milliseconds), and a client is
    # built at every resource set-up: each sensor tick and each run. The context depends only on these two
    # variables (httpx's trust_env), so one per value serves the process.
    return httpx.create_ssl_context()


def tls_context() -> ssl.SSLContext:
    """The TLS context httpx would build for a client with ``verify=True``, built once per process."""
    return _tls_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


class CoalesceHTTPClient:
    """Sends the calls of :class:`~dw_dagster.coalesce.client.CoalesceClient` (its docstring lists the
    arguments)."""

    def __init__(
        self,
        api_token: str,
        base_url: str = COALESCE_DEFAULT_BASE_URL,
        request_timeout: float = 30.0,
        request_max_retries: int = 3,
        request_retry_delay: float = 0.25,
        request_backoff_factor: float = 2.0,
        transport: httpx.BaseTransport | None = None,
        request_budget: float = DEFAULT_REQUEST_BUDGET,
        max_retry_wait: float = MAX_RETRY_WAIT,
    ):
        token = api_token.strip()
        if not token:
            raise ValueError("The Coalesce API token is empty.")
        for name, seconds in (("request_budget", request_budget), ("max_retry_wait", max_retry_wait)):
            if not seconds > 0:
                raise ValueError(f"Coalesce client {name}: {seconds!r}; expected a number of seconds above 0")
        self._token = token
        self.base_url = base_url.rstrip("/")
        self.request_max_retries = request_max_retries
        self.request_retry_delay = request_retry_delay
        self.request_backoff_factor = request_backoff_factor
        self.request_timeout = request_timeout
        self.request_budget = request_budget
        self.max_retry_wait = max_retry_wait
        # httpx masks the Authorization header in its reprs. Connection failures are retried by _request
        # rather than by a retrying transport, because httpx ignores HTTP(S)_PROXY and NO_PROXY when it
        # is given a transport.
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/json",
                "User-Agent": "dw-dagster",
            },
            timeout=httpx.Timeout(request_timeout),
            transport=transport,
            # A given transport brings its own TLS settings (httpx ignores verify then).
            verify=tls_context() if transport is None else True,
        )

    @property
    def _log(self) -> logging.Logger:
        return get_dagster_logger()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        starts_work: bool = False,
        timeout: float | None = None,
        budget: float | None = None,
        retry_timeouts: bool = True,
    ) -> httpx.Response:
        """Sends one call, retrying what is safe to retry, and returns its successful response.

        ``starts_work`` marks a call that must not run twice (startRun, rerun): it is retried only when
        the request never reached Coalesce (a failed connect) or on a status saying it was not processed.
        ``timeout`` and ``budget`` replace the client's for this call. Without ``retry_timeouts``, a request
        that times out (or a gateway's 504) is not repeated as it was: :class:`CoalesceTimeoutError` or the
        504 is raised at once, for the caller to ask for less.
        """
        endpoint = f"{method} {path}"
        retryable = NOT_PROCESSED_STATUSES if starts_work else RETRYABLE_STATUSES
        if not retry_timeouts:
            retryable = retryable - {GATEWAY_TIMEOUT}
        request_timeout = self.request_timeout if timeout is None else timeout
        attempt = 0
        budget = self.request_budget if budget is None else budget
        deadline = time.monotonic() + budget
        capped: float | None = None  # the longest Retry-After cut to max_retry_wait, said in the error
        while True:
            # No single request outlives the call's budget either.
            timeout = max(0.1, min(request_timeout, deadline - time.monotonic()))
            try:
                response = self._http.request(method, path, params=params, json=body, timeout=timeout)
            except httpx.TransportError as e:
                if not retry_timeouts and isinstance(e, httpx.TimeoutException):
                    raise CoalesceTimeoutError(
                        endpoint, f"no answer within {timeout:g}s ({type(e).__name__})", retries=attempt
                    ) from e
                # A failed connect never reached Coalesce: safe to repeat, even a run start.
                never_sent = isinstance(e, httpx.ConnectError | httpx.ConnectTimeout)
                reason = (
                    f"cannot connect to {self.base_url}: {e}" if never_sent else f"{type(e).__name__}: {e}"
                )
                if starts_work and not never_sent:
                    raise CoalesceConnectionError(
                        endpoint, f"{reason}; the run may have started, check list_runs before retrying"
                    ) from e
                if attempt >= self.request_max_retries:
                    raise CoalesceConnectionError(endpoint, reason, retries=attempt) from e
                asked = self._backoff(attempt)
                delay = self._wait(asked, deadline)
                if delay is None:
                    raise CoalesceConnectionError(
                        endpoint, reason, attempt, self._no_time(budget, asked)
                    ) from e
            else:
                self._log.debug(f"Coalesce {endpoint} -> {response.status_code}")
                if response.is_success:
                    return response
                retry_after = _retry_after_seconds(response)
                if response.status_code not in retryable or attempt >= self.request_max_retries:
                    why = self._capped(capped) if capped is not None else None
                    raise self._api_error(response, endpoint, attempt, why)
                asked = retry_after if retry_after is not None else self._backoff(attempt)
                delay = self._wait(asked, deadline)
                if delay is None:
                    raise self._api_error(
                        response, endpoint, attempt, self._no_time(budget, asked, retry_after)
                    )
                if retry_after is not None and retry_after > delay:
                    capped = max(capped or 0.0, retry_after)
                reason = str(self._api_error(response, endpoint, retries=0))
            attempt += 1
            self._log.info(
                f"Retrying Coalesce {endpoint} in {delay:.2f}s "
                f"(attempt {attempt}/{self.request_max_retries}): {reason}"
            )
            time.sleep(delay)

    def _backoff(self, attempt: int) -> float:
        return self.request_retry_delay * self.request_backoff_factor**attempt

    def _wait(self, asked: float, deadline: float) -> float | None:
        """The wait before the next retry, ``min(asked, max_retry_wait)``; None when that wait would spend
        what is left of the call's budget (no time for the retry itself)."""
        wait = min(asked, self.max_retry_wait)
        return None if wait >= deadline - time.monotonic() else wait

    def _capped(self, retry_after: float) -> str:
        return f"Coalesce asked to wait up to {retry_after:g}s (Retry-After), each wait was capped at {self.max_retry_wait:g}s"

    def _no_time(self, budget: float, asked: float, retry_after: float | None = None) -> str:
        wanted = (
            f"Retry-After asked {retry_after:g}s"
            if retry_after is not None
            else f"the next wait is {asked:g}s"
        )
        return (
            f"no time left in the call's {budget:g}s budget for another wait ({wanted}, "
            f"each wait capped at {self.max_retry_wait:g}s)"
        )

    def _api_error(
        self, response: httpx.Response, endpoint: str, retries: int, gave_up: str | None = None
    ) -> CoalesceAPIError:
        try:
            info = CoalesceErrorBody.model_validate(response.json()).error
            error_string, error_detail = info.error_string, info.error_detail
        except ValueError:
            # Not Coalesce's error body, e.g. a proxy's HTML page.
            error_string, error_detail = (response.text[:200] or response.reason_phrase), None
        return CoalesceAPIError(
            status=response.status_code,
            error_string=self._scrub(error_string),
            error_detail=self._scrub(error_detail) if error_detail else error_detail,
            endpoint=endpoint,
            retries=retries,
            gave_up=gave_up,
        )

    def _scrub(self, text: str) -> str:
        # An error message quoting the token must not carry it into logs or tracebacks.
        return text.replace(self._token, "***")

    def _call(
        self,
        model: type[ModelT],
        method: str,
        path: str,
        params: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        starts_work: bool = False,
        **request_options: Any,
    ) -> ModelT:
        """One call (see :meth:`_request` for ``request_options``), its response validated into ``model``."""
        endpoint = f"{method} {path}"
        response = self._request(
            method, path, params=params, body=body, starts_work=starts_work, **request_options
        )
        try:
            payload = response.json()
        except ValueError:
            raise CoalesceResponseError(
                endpoint, [f"<body>: expected JSON, got {response.text[:80]!r}"]
            ) from None
        return parse_response(model, payload, endpoint)

    def _paginate(self, model: type[ModelT], path: str, params: Mapping[str, Any]) -> Iterator[ModelT]:
        """Follows a list endpoint to its end: each page's ``next`` becomes the following request's
        ``startingFrom``, the other parameters (``orderBy`` included) unchanged.
        """
        params = dict(params)
        # Coalesce refuses a cursor without the order it was given for ("When using startingFrom, you
        # must also include the orderBy parameter", docs.coalesce.io/docs/api/query-parameters).
        params.setdefault("orderBy", "id")
        while True:
            # pydantic parametrizes its generic model with the class given at run time (and caches it);
            # mypy reads a subscript as a type expression, which a variable is not.
            page = self._call(CoalescePage[model], "GET", path, params=params)  # type: ignore[valid-type]
            yield from page.data
            # An empty cursor ends a listing too, as Coalesce's Transform MCP server reads it
            # (src/services/cache/snapshots.ts).
            if not page.next:
                return
            if page.next == params.get("startingFrom"):
                raise CoalesceResponseError(
                    f"GET {path}", [f"next: the cursor {page.next!r} did not advance"]
                )
            params["startingFrom"] = page.next


def _retry_after_seconds(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        # An HTTP date: fall back to the backoff.
        return None
