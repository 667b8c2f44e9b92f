"""Notifications: Slack through dagster-slack, with Block Kit messages."""

from dw_dagster.notifications.resources import SlackNotifier, slack_from_env

__all__ = ["SlackNotifier", "slack_from_env"]
