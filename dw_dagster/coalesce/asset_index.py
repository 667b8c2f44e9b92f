"""Which asset each Coalesce node is, and the job names, read back from the specs' ``coalesce/*``
metadata (what :class:`~dw_dagster.coalesce.translator.DagsterCoalesceTranslator` wrote)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import dagster as dg

from dw_dagster.coalesce.metadata import coalesce_specs


@dataclass(frozen=True)
class CoalesceAssetIndex:
    asset_keys: Mapping[tuple[str, str], dg.AssetKey]
    """(environment id, node id) -> asset key."""
    materialization_types: Mapping[dg.AssetKey, str | None]
    job_names: Mapping[tuple[str, str], str]
    """(environment id, job id) -> job name."""
    environment_names: Mapping[str, str] = field(default_factory=dict)
    """Environment id -> its name (``PROD``), as a person knows it."""

    @classmethod
    def from_specs(cls, specs: Iterable[dg.AssetSpec]) -> CoalesceAssetIndex:
        asset_keys: dict[tuple[str, str], dg.AssetKey] = {}
        materialization_types: dict[dg.AssetKey, str | None] = {}
        job_names: dict[tuple[str, str], str] = {}
        environment_names: dict[str, str] = {}
        for spec, meta in coalesce_specs(list(specs)):
            env_id = meta.environment_id
            if env_id is None or meta.node_id is None:
                continue
            if meta.environment_name:
                environment_names[env_id] = meta.environment_name
            asset_keys[(env_id, meta.node_id)] = spec.key
            materialization_types[spec.key] = meta.materialization
            for job_id, job_name in meta.job_refs:
                job_names[(env_id, job_id)] = job_name
        return cls(
            asset_keys=asset_keys,
            materialization_types=materialization_types,
            job_names=job_names,
            environment_names=environment_names,
        )

    @classmethod
    def when_needed(cls, specs: Iterable[dg.AssetSpec]) -> Callable[[], CoalesceAssetIndex]:
        """The index of ``specs``, made when first asked for (a sensor's tick, a run's step) rather than when
        the definitions load: reading every spec's ``coalesce/*`` set back is 0.3 s of CPU at 10,000 nodes,
        which a run worker, a code server that never ticks and each command would pay for nothing."""
        kept = list(specs)
        return functools.cache(lambda: cls.from_specs(kept))

    def asset_key(self, environment_id: str, node_id: str) -> dg.AssetKey | None:
        return self.asset_keys.get((environment_id, node_id))

    def job_name(self, environment_id: str, job_id: str | None) -> str | None:
        return None if job_id is None else self.job_names.get((environment_id, job_id))

    def environment_name(self, environment_id: str) -> str:
        """An environment as a person knows it: its name (``PROD``), or its id when no spec names it."""
        return self.environment_names.get(environment_id, environment_id)
