"""dagster-slack's ``SlackResource`` with a configurable API base URL and retries.

``SlackResource`` builds ``WebClient(token)`` against slack.com only; the local world's Slack stand-in
needs ``base_url``. Retries cover connection errors, rate limits and 5xx, so a short Slack outage delays a
message rather than losing it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import dagster as dg
from dagster_slack import SlackResource
from pydantic import Field
from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)


class SlackNotifier(SlackResource):
    base_url: str | None = Field(
        default=None, description="Slack Web API base URL, e.g. http://127.0.0.1:8766/api/ locally."
    )
    max_retries: int = Field(default=3, description="Retries on connection errors, 429 and 5xx.")

    def get_client(self) -> WebClient:
        handlers = [
            ConnectionErrorRetryHandler(max_retry_count=self.max_retries),
            RateLimitErrorRetryHandler(max_retry_count=self.max_retries),
            ServerErrorRetryHandler(max_retry_count=self.max_retries),
        ]
        if self.base_url:
            return WebClient(self.token, base_url=self.base_url, retry_handlers=handlers)
        return WebClient(self.token, retry_handlers=handlers)


def slack_from_env(env: Mapping[str, str] | None = None) -> SlackNotifier:
    env = os.environ if env is None else env
    return SlackNotifier(token=dg.EnvVar("SLACK_BOT_TOKEN"), base_url=env.get("SLACK_BASE_URL") or None)
