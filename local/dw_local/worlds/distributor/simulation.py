"""The distributor's business in numpy: catalogue, stock targets, daily shipments, receipts and transfers.

Pure and deterministic. Every draw comes from a generator seeded with (seed, purpose, day), so a night's
data never depends on which other nights were computed first.

Stock model: each (org, SKU) position has a target. Every business day it ships its demand, then receives
stock in proportion to what it lacks; the network receives shipments plus a small, mean-reverting net
change, so the network total moves by a fraction of a percent a day and every SKU's days of supply stays
near its design value (which keeps the reorder list stable night after night).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

import numpy as np
import pandas as pd

from dw_local.worlds.distributor.model import WorldSpec
from dw_local.worlds.night_world import rng_for, to_utc

HEALTHY, LOW, FLAGGED, TRANSFERRED = 0, 1, 2, 3
FG, BULK = "FG", "BULK"
# The source tables (Source nodes of project.yaml) the world loads.
ONHAND = "MTL_ONHAND_QUANTITIES_DETAIL"
ITEMS = "MTL_SYSTEM_ITEMS_B"
ORGS = "MTL_PARAMETERS"
ORDER_LINES = "OE_ORDER_LINES_ALL"
REGION_MAP = "REGION_MAP"
# Business-day activity hours (local); keeps every timestamp clear of the 02:00 DST changes.
_DAY_START_S, _DAY_END_S = 6 * 3600, 22 * 3600
_LINE_ID_BLOCK = 10**7

_NOUNS = ["Hex bolt", "Flange nut", "Ball bearing", "Hose clamp", "V-belt", "Roller chain", "Gate valve",
          "Pipe elbow", "Cable tie", "Grease fitting", "Shaft collar", "Pillow block", "O-ring kit",
          "Spur gear", "Drill bit", "Safety glove", "Fuse", "Relay", "Limit switch",
          "Air filter"]  # fmt: skip
_SIZES = ["1/4 in", "3/8 in", "1/2 in", "5/8 in", "3/4 in", "1 in", "M6", "M8", "M10", "M12", "2 in"]
_FINISHES = ["zinc", "stainless", "black oxide", "brass", "nylon", "steel", "galvanized", "HD"]
_UOMS = ["EA", "EA", "EA", "BX", "PK", "FT"]


def _apportion(total: int, weights: np.ndarray) -> np.ndarray:
    """Integers proportional to ``weights`` summing exactly to ``total`` (largest remainder)."""
    raw = total * weights / weights.sum()
    out = np.floor(raw).astype(np.int64)
    order = np.argsort(-(raw - out), kind="stable")
    out[order[: total - int(out.sum())]] += 1
    return out


def _at(day: date, seconds: np.ndarray) -> np.ndarray:
    return np.datetime64(day, "s") + seconds.astype("timedelta64[s]")


@dataclass(frozen=True)
class Catalog:
    """What does not change from night to night. Matrices are (org, SKU)."""

    item_ids: np.ndarray
    skus: list[str]
    descriptions: list[str]
    uoms: list[str]
    sku_class: np.ndarray
    org_ids: np.ndarray
    rate: np.ndarray  # expected units shipped on an ordinary weekday
    fg_target: np.ndarray  # stock the FG subinventory is replenished to
    bulk: np.ndarray  # static reserve in the BULK subinventory (0: no BULK row)
    bulk_changed_at: np.ndarray  # local wall time of each BULK row's last change
    transfer_qty: np.ndarray  # per SKU: units moved to the new org on the reference night
    from_org: int  # row of the org the transfers leave


@dataclass(frozen=True)
class Day:
    """One business day's close; ``index`` -1 is the state installed before the first night."""

    index: int
    date: date
    fg: np.ndarray
    changed_at: np.ndarray  # local wall time of each FG row's last change
    loaded_at: np.ndarray  # UTC time Qlik applied that change
    ordered: np.ndarray
    shipped: np.ndarray
    ship_at: np.ndarray  # local wall time of each shipment


def calendar_factor(spec: WorldSpec, d: date) -> float:
    dem = spec.demand
    f = dem.weekend_factor if d.weekday() >= 5 else 1.0
    next_month = (d.replace(day=28) + timedelta(days=4)).replace(day=1)
    if (next_month - d).days <= dem.month_end_days:
        f *= dem.month_end_factor
    return f * (dem.holiday_factor if d in spec.holidays.of_year(d.year) else 1.0)


def build_catalog(spec: WorldSpec) -> Catalog:
    rng = rng_for(spec.seed, "catalog")
    n, ref, reorder = spec.sku_count, spec.reference_night, spec.reorder
    orgs = spec.orgs
    from_org = next(k for k, o in enumerate(orgs) if o.id == ref.from_org)

    # Which SKUs play which part on the reference night.
    perm = rng.permutation(n)
    n_flag, n_low, n_moved = ref.newly_flagged_skus, reorder.normal_night_count, ref.transfer_skus
    sku_class = np.full(n, HEALTHY)
    sku_class[perm[:n_flag]] = FLAGGED
    sku_class[perm[n_flag : n_flag + n_low]] = LOW
    sku_class[perm[n_flag + n_low : n_low + n_moved]] = TRANSFERRED
    flagged, low = sku_class == FLAGGED, sku_class == LOW
    healthy = (sku_class == HEALTHY) | (sku_class == TRANSFERRED)

    dem = spec.demand
    avg = dem.median_daily_units * np.exp(dem.sigma_log * rng.standard_normal(n))
    avg = np.maximum(avg, dem.min_daily_units)
    avg[flagged] = rng.uniform(ref.flagged_daily_units.low, ref.flagged_daily_units.high, n_flag)
    dos = rng.uniform(reorder.healthy_days_of_supply.low, reorder.healthy_days_of_supply.high, n)
    dos[low] = rng.uniform(reorder.low_days_of_supply.low, reorder.low_days_of_supply.high, n_low)
    dos[flagged] = rng.uniform(ref.flagged_days_before.low, ref.flagged_days_before.high, n_flag)
    dos_after = rng.uniform(ref.flagged_days_after.low, ref.flagged_days_after.high, n_flag)
    # Healthy SKUs take up whatever makes the network hold its stated level.
    fixed = (avg * dos)[~healthy].sum()
    avg[healthy] *= (spec.stock.network_onhand_units - fixed) / (avg * dos)[healthy].sum()
    network = avg * dos

    base = np.array([o.share for o in orgs])
    base = base / base.sum()
    shares = rng.dirichlet(60 * base, size=n).T
    shares[:, low] = base[:, None]
    hub = np.delete(base, from_org)
    hub = hub / hub.sum() * (1 - ref.flagged_from_org_share)
    shares[:, flagged] = np.insert(hub, from_org, ref.flagged_from_org_share)[:, None]

    target = np.rint(network * shares).astype(np.int64)
    has_bulk = healthy & (rng.random(target.shape) < spec.stock.bulk_subinventory_share)
    bulk = np.where(has_bulk, np.floor(spec.stock.bulk_fraction * target), 0).astype(np.int64)
    fg_target = target - bulk
    bulk_days = rng.integers(1, 30, target.shape)
    bulk_changed_at = _at(spec.first_business_day, rng.uniform(_DAY_START_S, _DAY_END_S, target.shape)) - (
        bulk_days * 86400
    ).astype("timedelta64[s]")

    transfer = np.zeros(n, dtype=np.int64)
    transfer[flagged] = np.rint((dos[flagged] - dos_after) * avg[flagged])
    moved = sku_class == TRANSFERRED
    rest = ref.transfer_units - int(transfer.sum()) - int(moved.sum())
    if rest < 0:
        raise ValueError(
            "reference_night: the newly flagged SKUs' transfers exceed transfer_units; "
            "lower flagged_daily_units or widen the gap between flagged_days_before and flagged_days_after"
        )
    # Every transferred SKU moves at least one unit; the rest follows the from-org's stock.
    transfer[moved] = 1 + _apportion(rest, fg_target[from_org, moved].astype(float))
    too_big = moved & (transfer > ref.max_transfer_share * network)
    if too_big.any():
        raise ValueError(
            f"reference_night: {int(too_big.sum())} transferred SKUs would give up more than "
            f"max_transfer_share of their stock; raise transfer_skus or lower transfer_units"
        )

    rate = avg * shares / _mean_factor(spec)
    names = rng.integers(0, [len(_NOUNS), len(_SIZES), len(_FINISHES)], size=(n, 3))
    item_ids = spec.first_item_id + np.arange(n)
    return Catalog(
        item_ids=item_ids,
        skus=[
            f"{_NOUNS[a][:2].upper()}-{iid % 100000:05d}"
            for iid, (a, _, _) in zip(item_ids, names, strict=True)
        ],
        descriptions=[f"{_NOUNS[a]} {_SIZES[b]} {_FINISHES[c]}" for a, b, c in names],
        uoms=[_UOMS[k] for k in rng.integers(0, len(_UOMS), n)],
        sku_class=sku_class,
        org_ids=np.array([o.id for o in orgs]),
        rate=rate,
        fg_target=fg_target,
        bulk=bulk,
        bulk_changed_at=bulk_changed_at,
        transfer_qty=transfer,
        from_org=from_org,
    )


def _mean_factor(spec: WorldSpec) -> float:
    # Over a year, so the design days of supply hold on average whatever the weekday and month-end mix.
    start = spec.first_business_day
    return float(np.mean([calendar_factor(spec, start + timedelta(days=k)) for k in range(365)]))


class Simulation:
    """Business days computed in order and kept; ``day(t)`` is the close of business day ``t``."""

    def __init__(self, spec: WorldSpec, catalog: Catalog):
        self.spec = spec
        self.catalog = catalog
        self._reference_index: int | None = None
        self._days: list[Day] = [self._initial()]

    def set_reference_index(self, index: int | None) -> None:
        """The business day whose net change is set to the reference night's EBS change."""
        if index != self._reference_index:
            # Every later day follows from that one; recomputing from the start costs milliseconds.
            self._reference_index = index
            del self._days[1:]

    def business_date(self, t: int) -> date:
        return self.spec.first_business_day + timedelta(days=t)

    def day(self, t: int) -> Day:
        """The close of business day ``t``; -1 is the stock installed before the first night."""
        if t < -1:
            raise ValueError(f"business day {t}: the stock model starts at -1")
        while len(self._days) <= t + 1:
            self._days.append(self._next(self._days[-1]))
        return self._days[t + 1]

    def demand(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """(ordered units, local ship times) of business day ``t``, before stock limits."""
        rng = rng_for(self.spec.seed, "demand", t)
        shape = self.catalog.rate.shape
        sigma = self.spec.demand.noise_sigma
        noise = np.exp(sigma * rng.standard_normal(shape) - sigma**2 / 2)
        lam = self.catalog.rate * calendar_factor(self.spec, self.business_date(t)) * noise
        # Stochastic rounding keeps slow movers' expected demand unbiased.
        ordered = np.floor(lam + rng.random(shape)).astype(np.int64)
        ship_at = _at(self.business_date(t), rng.uniform(_DAY_START_S, _DAY_END_S, shape))
        return ordered, ship_at

    def _initial(self) -> Day:
        rng = rng_for(self.spec.seed, "initial")
        shape = self.catalog.fg_target.shape
        d = self.business_date(-1)
        changed_at = _at(d, rng.uniform(_DAY_START_S, _DAY_END_S, shape)) - (
            rng.integers(0, 7, shape) * 86400
        ).astype("timedelta64[s]")
        zero = np.zeros(shape, dtype=np.int64)
        return Day(-1, d, self.catalog.fg_target.copy(), changed_at, self._replicated(changed_at, rng),
                   zero, zero, changed_at)  # fmt: skip

    def _replicated(self, changed_at: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        # Qlik applies a change a few seconds to a minute and a half after EBS commits it.
        lag = rng.uniform(2, 90, changed_at.shape).astype("timedelta64[s]")
        return to_utc(changed_at, self.spec.timezone) + lag

    def _next(self, prev: Day) -> Day:
        t = prev.index + 1
        spec, cat = self.spec, self.catalog
        ordered, ship_at = self.demand(t)
        shipped = np.minimum(ordered, prev.fg)
        post = prev.fg - shipped

        level = int(prev.fg.sum() + cat.bulk.sum())
        rng = rng_for(spec.seed, "receipts", t)
        if t == self._reference_index:
            net = round(level * spec.reference_night.ebs_change_pct / 100)
        else:
            pull = spec.stock.reversion * (spec.stock.network_onhand_units - level) / level
            net = round(level * (pull + spec.stock.daily_change_sigma_pct / 100 * rng.standard_normal()))
        receipts_total = max(0, int(shipped.sum()) + net)
        need = np.maximum(cat.fg_target - post, 0).astype(float).ravel()
        if receipts_total <= need.sum():
            received = _apportion(receipts_total, need)
        else:
            extra = receipts_total - int(need.sum())
            received = need.astype(np.int64) + _apportion(extra, cat.fg_target.astype(float).ravel())
        fg = post + received.reshape(post.shape)

        touched = fg != prev.fg
        change_at = _at(self.business_date(t), rng.uniform(_DAY_START_S, _DAY_END_S, fg.shape))
        changed_at = np.where(touched, change_at, prev.changed_at)
        loaded_at = np.where(touched, self._replicated(change_at, rng), prev.loaded_at)
        return Day(t, self.business_date(t), fg, changed_at, loaded_at, ordered, shipped, ship_at)


@dataclass(frozen=True)
class Opening:
    """The new org and the transfers posted on the reference night (or on its benign twin, the same
    opening with the org mapped, which may use another org id)."""

    index: int
    opened_at: datetime  # local
    replicated_at: datetime  # UTC
    org_id: int | None = None  # None: the reference night's new org


def onhand_frame(spec: WorldSpec, cat: Catalog, day: Day, opening: Opening | None) -> pd.DataFrame:
    """``MTL_ONHAND_QUANTITIES_DETAIL`` at the close of ``day``; EBS keeps no zero-quantity rows."""
    fg, changed_at, loaded_at = day.fg.copy(), day.changed_at.copy(), day.loaded_at.copy()
    m, n = fg.shape
    org_ids = np.repeat(cat.org_ids, n).reshape(m, n)
    item_ids = np.tile(cat.item_ids, (m, 1))
    parts = []
    if opening is not None and day.index >= opening.index:
        moved = cat.transfer_qty > 0
        src = cat.from_org
        fg[src] -= cat.transfer_qty
        if (fg[src] < 0).any():
            raise ValueError(
                f"reference_night: {int((fg[src] < 0).sum())} SKUs would transfer more than "
                f"{spec.reference_night.from_org} holds; lower transfer_units"
            )
        opened, replicated = np.datetime64(opening.opened_at, "s"), np.datetime64(opening.replicated_at, "s")
        changed_at[src, moved] = np.maximum(changed_at[src, moved], opened)
        loaded_at[src, moved] = np.maximum(loaded_at[src, moved], replicated)
        k = int(moved.sum())
        new_org = opening.org_id or spec.reference_night.new_org.id
        parts.append(_rows(new_org, cat.item_ids[moved], FG, cat.transfer_qty[moved],
                           np.full(k, opened), np.full(k, replicated)))  # fmt: skip
    parts.insert(0, _rows(org_ids, item_ids, FG, fg, changed_at, loaded_at))
    bulk_loaded = to_utc(cat.bulk_changed_at, spec.timezone) + np.timedelta64(30, "s")
    parts.insert(1, _rows(org_ids, item_ids, BULK, cat.bulk, cat.bulk_changed_at, bulk_loaded))
    frame = pd.concat(parts, ignore_index=True)
    frame = frame[frame["TRANSACTION_QUANTITY"] > 0]
    return frame.sort_values(["ORGANIZATION_ID", "INVENTORY_ITEM_ID", "SUBINVENTORY_CODE"], ignore_index=True)


def _rows(org, item, subinventory, qty, changed_at, loaded_at) -> pd.DataFrame:
    org = np.broadcast_to(org, np.shape(qty)).ravel()
    item = np.ravel(item)
    sub_no = 1 if subinventory == FG else 2
    return pd.DataFrame({
        # A stable row id per (org, SKU, subinventory), as EBS keeps for a detail row.
        "ONHAND_QUANTITIES_ID": (org.astype(np.int64) * 1_000_000 + item) * 10 + sub_no,
        "ORGANIZATION_ID": org,
        "INVENTORY_ITEM_ID": item,
        "SUBINVENTORY_CODE": subinventory,
        "TRANSACTION_QUANTITY": np.ravel(qty),
        "LAST_UPDATE_DATE": np.ravel(changed_at),
        "_QLIK_LOADED_AT": np.ravel(loaded_at),
    })  # fmt: skip


def line_id_range(t: int) -> tuple[int, int]:
    """[first, last) LINE_ID of business day ``t``'s order lines: a night reloads exactly its own lines."""
    return (t + 1000) * _LINE_ID_BLOCK, (t + 1001) * _LINE_ID_BLOCK


def line_night_sql(column: str = '"LINE_ID"') -> str:
    """SQL for the business day an order line's ``LINE_ID`` belongs to (the inverse of line_id_range)."""
    return f"(FLOOR({column} / {_LINE_ID_BLOCK}) - 1000)"


def order_lines_frame(spec: WorldSpec, cat: Catalog, t: int, ordered: np.ndarray, shipped: np.ndarray,
                      ship_at: np.ndarray) -> pd.DataFrame:  # fmt: skip
    """``OE_ORDER_LINES_ALL`` for one business day: one closed line per (org, SKU) that shipped."""
    m, n = shipped.shape
    keep = shipped.ravel() > 0
    pos = np.arange(m * n)[keep]
    at = ship_at.ravel()[keep]
    rng = rng_for(spec.seed, "order-lines", t)
    return pd.DataFrame({
        "LINE_ID": line_id_range(t)[0] + pos,
        "SHIP_FROM_ORG_ID": np.repeat(cat.org_ids, n)[keep],
        "INVENTORY_ITEM_ID": np.tile(cat.item_ids, m)[keep],
        "ORDERED_QUANTITY": ordered.ravel()[keep],
        "SHIPPED_QUANTITY": shipped.ravel()[keep],
        "ACTUAL_SHIPMENT_DATE": at,
        "FLOW_STATUS_CODE": "CLOSED",
        "LAST_UPDATE_DATE": at,
        "_QLIK_LOADED_AT": to_utc(at, spec.timezone) + rng.uniform(2, 90, len(at)).astype("timedelta64[s]"),
    })  # fmt: skip
