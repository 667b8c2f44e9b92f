"""``config.resolve_env_vars``: resources and config used outside Dagster's resolution get their EnvVars'
values, at any depth; what holds none is returned as it is (no copy: a resource's copy infers its schema)."""

from __future__ import annotations

import dagster as dg
import pytest

from dw_dagster.config import DwConfigError, resolve_env_vars
from dw_dagster.notifications.resources import SlackNotifier


class _Nested(dg.Config):
    labels: dict[str, str]
    names: list[str]


def test_an_env_var_is_replaced_by_its_value_in_a_copy(monkeypatch):
    monkeypatch.setenv("DW_TEST_TOKEN", "xoxb-resolved")
    slack = SlackNotifier(token=dg.EnvVar("DW_TEST_TOKEN"), base_url="http://127.0.0.1:1/api/")
    resolved = resolve_env_vars(slack)
    assert resolved is not slack and resolved.token == "xoxb-resolved"
    assert resolved.base_url == slack.base_url and isinstance(slack.token, dg.EnvVar)


def test_env_vars_in_a_mapping_or_a_list_are_replaced(monkeypatch):
    monkeypatch.setenv("DW_TEST_HOST", "db.internal")
    config = _Nested(
        labels={"host": dg.EnvVar("DW_TEST_HOST"), "port": "443"}, names=["a", dg.EnvVar("DW_TEST_HOST")]
    )
    resolved = resolve_env_vars(config)
    assert resolved.labels == {"host": "db.internal", "port": "443"} and resolved.names == [
        "a",
        "db.internal",
    ]
    assert not any(isinstance(v, dg.EnvVar) for v in [*resolved.labels.values(), *resolved.names])


def test_what_holds_no_env_var_is_returned_as_it_is():
    slack = SlackNotifier(token="xoxb-plain", base_url=None)
    config = _Nested(labels={"port": "443"}, names=["a"])
    assert resolve_env_vars(slack) is slack and resolve_env_vars(config) is config
    labels = {"port": "443"}
    assert resolve_env_vars(labels) is labels


def test_an_unset_variable_is_named(monkeypatch):
    monkeypatch.delenv("DW_TEST_UNSET", raising=False)
    with pytest.raises(DwConfigError, match="DW_TEST_UNSET: not set"):
        resolve_env_vars(SlackNotifier(token=dg.EnvVar("DW_TEST_UNSET")))
