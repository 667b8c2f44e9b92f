"""Coalesce jobs mirrored as assets: materializing a job's nodes from Dagster runs that job in Coalesce.

A job's nodes (those whose ``coalesce/jobs`` name it) become one multi-asset. Its run starts the job, waits
for it (with a ceiling) and reports each node built as a materialization, with the same ``coalesce/*``
metadata the polling sensor writes, so the sensor does not report that Coalesce run a second time.
"""

# No ``from __future__ import annotations``: Dagster reads the op's config class from its annotation.

import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import dagster as dg

from dw_dagster.coalesce.asset_index import CoalesceAssetIndex
from dw_dagster.coalesce.metadata import coalesce_specs
from dw_dagster.coalesce.models import CoalesceUserCredentials
from dw_dagster.coalesce.resources import CoalesceWorkspace
from dw_dagster.coalesce.run_report import fetch_coalesce_run_report


def user_credentials_from_env(
    username: str,
    *,
    password_var: str | None = None,
    private_key_var: str | None = None,
    passphrase_var: str | None = None,
    warehouse: str | None = None,
    role: str | None = None,
) -> CoalesceUserCredentials:
    """startRun's ``userCredentials`` with the secret read now from its environment variable: a password (or
    a Snowflake programmatic access token, which Snowflake takes wherever a password goes,
    https://docs.snowflake.com/en/user-guide/programmatic-access-tokens) as ``snowflakeAuthType`` Basic, or
    a private key, PEM text or its base64, with the passphrase of an encrypted one, as KeyPair
    (``snowflakeKeyPairKey`` "The PEM-encoded private key", ``snowflakeKeyPairPass``: Coalesce's OpenAPI
    ``JobsInitiateRunRequest``). The key is checked here, so a wrong one fails naming its variable instead of
    failing the Coalesce run. Raises ValueError naming the variable and what it expected."""
    if (password_var is None) == (private_key_var is None):
        raise ValueError("give one of a password variable and a private key variable")
    if private_key_var is None:
        password = os.environ.get(password_var or "")
        if not password:
            raise ValueError(f"{password_var}: not set (a Snowflake password or programmatic access token)")
        return CoalesceUserCredentials(
            snowflake_username=username,
            snowflake_password=password,
            snowflake_warehouse=warehouse,
            snowflake_role=role,
            snowflake_auth_type="Basic",
        )
    key = os.environ.get(private_key_var, "")
    if not key.strip():
        raise ValueError(f"{private_key_var}: not set (the PEM private key of {username}'s key pair)")
    passphrase = os.environ.get(passphrase_var) if passphrase_var else None
    if passphrase_var and not passphrase:
        # Coalesce refuses a key encrypted with an empty passphrase (docs.coalesce.io, "Snowflake Key Pair
        # Authentication").
        raise ValueError(
            f"{passphrase_var}: not set (the passphrase of the private key in {private_key_var})"
        )
    pem = _pem_private_key(key, private_key_var, passphrase, passphrase_var)
    return CoalesceUserCredentials(
        snowflake_username=username,
        snowflake_key_pair_key=pem,
        snowflake_key_pair_pass=passphrase,
        snowflake_warehouse=warehouse,
        snowflake_role=role,
        snowflake_auth_type="KeyPair",
    )


def _pem_private_key(text: str, var: str, passphrase: str | None, passphrase_var: str | None) -> str:
    """The PEM text of a private key given as PEM or as its base64 (one line), once it loads."""
    import base64
    import binascii

    from cryptography.hazmat.primitives import serialization

    pem = text
    if not text.lstrip().startswith("-----BEGIN"):
        try:
            pem = base64.b64decode(text.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise ValueError(f"{var}: expected a PEM private key or its base64, got neither") from None
    try:
        serialization.load_pem_private_key(pem.encode(), password=passphrase.encode() if passphrase else None)
    except TypeError as e:
        if passphrase is None:
            raise ValueError(
                f"{var}: the private key is encrypted; name the variable holding its passphrase"
            ) from None
        raise ValueError(
            f"{var}: the private key is not encrypted; {passphrase_var} is not needed ({e})"
        ) from None
    except ValueError:
        which = f" with the passphrase in {passphrase_var}" if passphrase else ""
        raise ValueError(f"{var}: not a private key that loads{which} (PEM, PKCS#8 or PKCS#1)") from None
    return pem


@dataclass(frozen=True)
class CoalesceRunAs:
    """Who a Dagster-started run runs as in Snowflake: a password (or programmatic access token) variable,
    or a private key variable (and its passphrase's, for an encrypted key); the secret is read when the run
    starts."""

    snowflake_username: str
    snowflake_password_env_var: str | None = None
    snowflake_warehouse: str | None = None
    snowflake_role: str | None = None
    snowflake_private_key_env_var: str | None = None
    snowflake_private_key_passphrase_env_var: str | None = None

    def __post_init__(self) -> None:
        if (self.snowflake_password_env_var is None) == (self.snowflake_private_key_env_var is None):
            raise ValueError(
                f"run_as of {self.snowflake_username}: set one of snowflake_password_env_var (a password or "
                "programmatic access token) and snowflake_private_key_env_var (a key pair)"
            )
        if self.snowflake_private_key_passphrase_env_var and not self.snowflake_private_key_env_var:
            raise ValueError(
                f"run_as of {self.snowflake_username}: snowflake_private_key_passphrase_env_var goes with "
                "snowflake_private_key_env_var"
            )

    def credentials(self) -> CoalesceUserCredentials:
        try:
            return user_credentials_from_env(
                self.snowflake_username,
                password_var=self.snowflake_password_env_var,
                private_key_var=self.snowflake_private_key_env_var,
                passphrase_var=self.snowflake_private_key_passphrase_env_var,
                warehouse=self.snowflake_warehouse,
                role=self.snowflake_role,
            )
        except ValueError as e:
            raise dg.Failure(f"{e}; the Coalesce run needs it") from None


class CoalesceJobRunConfig(dg.Config):
    poll_seconds: float = 5.0
    timeout_seconds: float = 3600.0


@dataclass(frozen=True)
class CoalesceJobAssets:
    external_specs: list[dg.AssetSpec]
    """The nodes no mirrored job builds: observed, never materialized from Dagster."""
    assets_defs: list[dg.AssetsDefinition]


def build_job_assets(
    workspace: CoalesceWorkspace, specs: Sequence[dg.AssetSpec], run_as: Mapping[str, CoalesceRunAs]
) -> CoalesceJobAssets:
    """One multi-asset per job named in ``run_as`` (job name -> identity); every other node stays an
    external asset. A node built by two mirrored jobs, or a job no node names, is refused."""
    if not run_as:
        return CoalesceJobAssets(list(specs), [])
    by_job: dict[tuple[str, str, str], list[dg.AssetSpec]] = {}
    owner: dict[dg.AssetKey, str] = {}
    for spec, meta in coalesce_specs(specs):
        for job_id, job_name in meta.job_refs:
            if job_name not in run_as:
                continue
            if spec.key in owner:
                raise ValueError(
                    f"materialize_jobs: {spec.key.to_user_string()} is built by both {owner[spec.key]!r} and "
                    f"{job_name!r}; an asset can be materialized by one job only"
                )
            owner[spec.key] = job_name
            by_job.setdefault((meta.environment_id or "", job_id, job_name), []).append(spec)
    missing = sorted(set(run_as) - {name for _, _, name in by_job})
    if missing:
        raise ValueError(f"materialize_jobs: no node is built by these Coalesce jobs: {missing}")
    index = CoalesceAssetIndex.when_needed(specs)
    assets_defs = [
        _job_multi_asset(workspace, env_id, job_id, job_name, job_specs, index, run_as[job_name])
        for (env_id, job_id, job_name), job_specs in by_job.items()
    ]
    return CoalesceJobAssets([s for s in specs if s.key not in owner], assets_defs)


def _job_multi_asset(
    workspace: CoalesceWorkspace,
    environment_id: str,
    job_id: str,
    job_name: str,
    job_specs: list[dg.AssetSpec],
    index: Callable[[], CoalesceAssetIndex],
    run_as: CoalesceRunAs,
) -> dg.AssetsDefinition:

    @dg.multi_asset(
        name=f"coalesce_job_{_op_name(job_name)}",
        # Skippable: a node the Coalesce run did not build is not reported built (Dagster would otherwise
        # materialize every required output the step did not yield).
        specs=[s.replace_attributes(skippable=True) for s in job_specs],
        description=f"Runs the Coalesce job {job_name} (environment {environment_id}).",
    )
    def _run_job(
        context: dg.AssetExecutionContext, config: CoalesceJobRunConfig
    ) -> Iterator[dg.MaterializeResult[None]]:
        with workspace.new_client() as client:
            run_id = client.start_run(environment_id, job_id=job_id, user_credentials=run_as.credentials())
            context.log.info(f"Started Coalesce run {run_id} of job {job_name}.")
            if client.org_id is None:
                context.log.warning(
                    f"No Coalesce organization id (org_id, COALESCE_ORG_ID): if this run is stopped, Coalesce "
                    f"run {run_id} cannot be canceled and goes on."
                )
            # Stopping this Dagster run (or its timeout) cancels the Coalesce run (wait_for_run).
            run = client.wait_for_run(
                run_id,
                poll_interval=config.poll_seconds,
                timeout=config.timeout_seconds,
                environment_id=environment_id,
            )
            report = fetch_coalesce_run_report(client, run, index())
        yield from _results(report.materializations, {s.key for s in job_specs})
        if report.failed:
            failed = (
                ", ".join(f"{f.node_name} ({f.error})" for f in report.failures)
                or report.run.run_failure_reason
            )
            raise dg.Failure(f"{report.describe()} {report.run.run_status.value}: {failed}")

    return _run_job


def _results(
    materializations: Sequence[dg.AssetMaterialization], keys: set[dg.AssetKey]
) -> Iterator[dg.MaterializeResult[None]]:
    for m in materializations:
        if m.asset_key in keys:
            yield dg.MaterializeResult(asset_key=m.asset_key, metadata=dict(m.metadata))


def _op_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name).lower()
