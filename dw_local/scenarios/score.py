"""Scoring scenario reports: dw-dagster beside the Elementary-default baseline, on the same nights.

- **Recall**: nights expected to raise an incident (a fault played, unless the scenario says otherwise) on
  which the detector alarmed on a related table (the tables the fault changes and everything downstream).
- **False alarms per 100 table-nights**: alarms on a table no fault in force relates to (benign and clean
  nights, unrelated tables), per 100 monitored tables x nights played. One alarm per table per night, however
  many checks failed on it.
- **Root-cause accuracy** (dw-dagster only; Elementary does not diagnose): faults with an expected class
  whose incident's diagnosis has one of the expected classes and names every expected cause key.
- **Time to detect**: seconds from the Coalesce run's end to the first alarm on a related table (for the
  baseline: to when the alarming value was recorded, which is when Elementary could score it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median
from typing import Any

from dw_local.scenarios.runner import NightReport, ScenarioReport

DW = "dw-dagster"
BASELINE = "Elementary default"


@dataclass
class Figures:
    faults: int = 0
    detected: int = 0
    table_nights: int = 0
    false_alarms: int = 0
    diagnosable: int = 0
    correct: int = 0
    ttd: list[float] = field(default_factory=list)

    def add(self, other: Figures) -> None:
        for name in ("faults", "detected", "table_nights", "false_alarms", "diagnosable", "correct"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.ttd += other.ttd

    def as_dict(self) -> dict[str, Any]:
        return {
            "faults": self.faults,
            "detected": self.detected,
            "recall": _ratio(self.detected, self.faults),
            "table_nights": self.table_nights,
            "false_alarms": self.false_alarms,
            "false_alarms_per_100_table_nights": _ratio(100 * self.false_alarms, self.table_nights),
            "root_cause_correct": self.correct,
            "root_cause_scored": self.diagnosable,
            "root_cause_accuracy": _ratio(self.correct, self.diagnosable),
            "time_to_detect_median_s": round(median(self.ttd), 2) if self.ttd else None,
            "time_to_detect_max_s": round(max(self.ttd), 2) if self.ttd else None,
        }


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 4) if b else None


def _is_related(asset: str, night: NightReport) -> bool:
    return night.related == ["*"] or asset in night.related


def score_night(night: NightReport) -> tuple[Figures, Figures, dict[str, Any]]:
    dw, base = Figures(table_nights=len(night.monitored)), Figures(table_nights=len(night.monitored))
    dw_assets = {a.asset for a in night.alarms}
    base_assets = {a["asset"] for a in night.baseline_alarms}
    dw.false_alarms = sum(not _is_related(a, night) for a in dw_assets)
    base.false_alarms = sum(not _is_related(a, night) for a in base_assets)
    detail: dict[str, Any] = {"night": night.night, "events": night.events}
    if night.expects_incident:
        dw.faults = base.faults = 1
        dw_hits = [a for a in night.alarms if _is_related(a.asset, night)]
        base_hits = [a for a in night.baseline_alarms if _is_related(a["asset"], night)]
        dw.detected, base.detected = int(bool(dw_hits)), int(bool(base_hits))
        if dw_hits:
            dw.ttd.append(min((a.at - night.run_ended_at).total_seconds() for a in dw_hits))
        if base_hits:
            base.ttd.append(min((a["recorded_at"] - night.run_ended_at).total_seconds() for a in base_hits))
        if night.expected_classes:
            dw.diagnosable = 1
            dw.correct = int(
                any(
                    i.classification in night.expected_classes and set(night.expected_keys) <= set(i.cause_keys)
                    for i in night.incidents
                )
            )
            detail["root_cause"] = "correct" if dw.correct else "wrong"
        detail.update(dw_detected=bool(dw.detected), baseline_detected=bool(base.detected))
    if dw.false_alarms or base.false_alarms:
        detail.update(dw_false_alarms=dw.false_alarms, baseline_false_alarms=base.false_alarms)
    return dw, base, detail


def score_reports(reports: list[ScenarioReport]) -> dict[str, Any]:
    total = {DW: Figures(), BASELINE: Figures()}
    scenarios = []
    for report in reports:
        figures = {DW: Figures(), BASELINE: Figures()}
        details = []
        for night in report.nights:
            dw, base, detail = score_night(night)
            figures[DW].add(dw)
            figures[BASELINE].add(base)
            if len(detail) > 2:
                details.append(detail)
        for name in total:
            total[name].add(figures[name])
        scenarios.append(
            {"name": report.name, "world": report.world, "nights": len(report.nights), "details": details,
             **{name: f.as_dict() for name, f in figures.items()}}  # fmt: skip
        )
    worlds = sorted({r.world for r in reports})
    return {"scenarios": scenarios, "worlds": worlds, "total": {name: f.as_dict() for name, f in total.items()}}


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.0f}%"


def format_score(score: dict[str, Any]) -> str:
    t = score["total"]
    dw, base = t[DW], t[BASELINE]

    def ttd(f: dict[str, Any]) -> str:
        return "n/a" if f["time_to_detect_median_s"] is None else (
            f"{f['time_to_detect_median_s']:.1f} s median, {f['time_to_detect_max_s']:.1f} s max"
        )

    lines = [
        f"{len(score['scenarios'])} scenarios over {len(score['worlds'])} worlds ({', '.join(score['worlds'])})",
        "",
        f"| | {DW} | {BASELINE} (z > 3, 14 days) |",
        "|---|---|---|",
        f"| recall | {dw['detected']}/{dw['faults']} ({_pct(dw['recall'])}) "
        f"| {base['detected']}/{base['faults']} ({_pct(base['recall'])}) |",
        f"| false alarms per 100 table-nights | {dw['false_alarms_per_100_table_nights'] or 0:.2f} "
        f"({dw['false_alarms']} of {dw['table_nights']}) | {base['false_alarms_per_100_table_nights'] or 0:.2f} "
        f"({base['false_alarms']} of {base['table_nights']}) |",
        f"| root-cause accuracy | {dw['root_cause_correct']}/{dw['root_cause_scored']} "
        f"({_pct(dw['root_cause_accuracy'])}) | n/a (no diagnosis) |",
        f"| time to detect (run end -> first alarm) | {ttd(dw)} | {ttd(base)} |",
        "",
        f"| scenario | world | nights | faults | {DW} detected | baseline detected | {DW} false alarms "
        "| baseline false alarms | root cause |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in score["scenarios"]:
        d, b = s[DW], s[BASELINE]
        cause = "-" if not d["root_cause_scored"] else f"{d['root_cause_correct']}/{d['root_cause_scored']}"
        lines.append(
            f"| {s['name']} | {s['world']} | {s['nights']} | {d['faults']} | {d['detected']} | {b['detected']} "
            f"| {d['false_alarms']} | {b['false_alarms']} | {cause} |"
        )
    return "\n".join(lines)
