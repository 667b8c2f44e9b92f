"""Scoring scenario reports: dw-dagster beside the Elementary baseline (``baseline.py``: Elementary 0.25.1's
defaults on the monitors the metrics file asks for), on the same nights.

- **Recall**: nights expected to raise an incident (a fault played, unless the scenario says otherwise) on
  which the detector alarmed on a related table (the tables the fault changes and everything downstream);
  also split by whether the Coalesce job failed that night (a failure anyone's run alerts show) or the
  fault was silent (the job green, or no run at all).
- **False alarms per 100 table-nights**: alarms on a table no fault in force relates to (benign and clean
  nights, unrelated tables), per 100 monitored tables x nights played. One alarm per table per night, however
  many checks failed on it.
- **Root-cause accuracy** (dw-dagster only; Elementary does not diagnose): faults whose incident opened that
  night has a finding on a related table, one of the expected classes and every expected cause key.
- **The baseline's repeats**: Elementary's detection period scores the previous night's point again; an
  alarm on it is a repeat of last night's, not a detection of tonight's fault (recall counts tonight's
  points only), and on a table no fault in force relates to it is a false alarm like any other.
- **Time to detect**: seconds from the Coalesce run's end to the first alarm on a related table (for the
  baseline: to when the alarming value was recorded, which is when Elementary could score it). The two are
  compared only on the faults both detected; each detector's figure over all its own detections is given too.
- **Lifecycle** (dw-dagster only): nights with ``expect.joins`` whose findings continued an earlier open
  incident (``true``: and opened none of their own on a related table) or opened a new incident on a
  related table (``false``). Root cause on a ``joins: true`` night is scored on the continued incident.
- **WARN findings** on a night with ``expect.max_severity: WARN`` are not false alarms: they are counted apart
  (table-nights with only WARN findings); anything above WARN still is one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median
from typing import Any

from dw_dagster.records.keys import split_labels
from dw_local.scenarios.baseline import NAME as BASELINE
from dw_local.scenarios.runner import NightReport, ScenarioReport

DW = "dw-dagster"


@dataclass
class Figures:
    faults: int = 0
    detected: int = 0
    table_nights: int = 0
    false_alarms: int = 0
    diagnosable: int = 0
    correct: int = 0
    failed_run_faults: int = 0
    failed_run_detected: int = 0
    lifecycle_scored: int = 0
    lifecycle_correct: int = 0
    warnings: int = 0
    """Table-nights with WARN findings only, on nights that allow WARN (``expect.max_severity``)."""
    ttd: list[float] = field(default_factory=list)
    ttd_both: list[float] = field(default_factory=list)
    """Time to detect on the faults both detectors detected: the only fair comparison."""

    def add(self, other: Figures) -> None:
        for name in ("faults", "detected", "table_nights", "false_alarms", "diagnosable", "correct",
                     "failed_run_faults", "failed_run_detected", "lifecycle_scored", "lifecycle_correct",
                     "warnings"):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.ttd += other.ttd
        self.ttd_both += other.ttd_both

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
            "failed_run_faults": self.failed_run_faults,
            "failed_run_detected": self.failed_run_detected,
            "failed_run_recall": _ratio(self.failed_run_detected, self.failed_run_faults),
            "lifecycle_correct": self.lifecycle_correct,
            "lifecycle_scored": self.lifecycle_scored,
            "lifecycle_accuracy": _ratio(self.lifecycle_correct, self.lifecycle_scored),
            "warnings": self.warnings,
            "silent_faults": self.faults - self.failed_run_faults,
            "silent_detected": self.detected - self.failed_run_detected,
            "silent_recall": _ratio(
                self.detected - self.failed_run_detected, self.faults - self.failed_run_faults
            ),
            "time_to_detect_median_s": _median(self.ttd),
            "time_to_detect_max_s": round(max(self.ttd), 2) if self.ttd else None,
            "both_detected": len(self.ttd_both),
            "time_to_detect_both_median_s": _median(self.ttd_both),
            "time_to_detect_both_max_s": round(max(self.ttd_both), 2) if self.ttd_both else None,
        }


def _median(values: list[float]) -> float | None:
    return round(median(values), 2) if values else None


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 4) if b else None


def _right_class(got: str | None, expected: list[str]) -> bool:
    """A sign change is the vocabulary's unit change by a factor of -1 (docs/scenarios.md)."""
    return got in expected or (got == "sign_change" and "unit_change" in expected)


def _is_related(asset: str, night: NightReport) -> bool:
    return night.related == ["*"] or asset in night.related


def _exceeds(alarm: Any, night: NightReport) -> bool:
    """Whether an alarm counts against a night: any finding does, unless the night allows WARN."""
    return night.max_severity != "WARN" or alarm.severity != "WARN"


def score_night(night: NightReport) -> tuple[Figures, Figures, dict[str, Any]]:
    dw, base = Figures(table_nights=len(night.monitored)), Figures(table_nights=len(night.monitored))
    dw_assets = {a.asset for a in night.alarms if _exceeds(a, night)}
    warned = {a.asset for a in night.alarms if not _exceeds(a, night)} - dw_assets
    base_assets = {a["asset"] for a in night.baseline_alarms}
    dw.false_alarms = sum(not _is_related(a, night) for a in dw_assets)
    dw.warnings = sum(not _is_related(a, night) for a in warned)
    base.false_alarms = sum(not _is_related(a, night) for a in base_assets)
    detail: dict[str, Any] = {"night": night.night, "events": night.events}
    if night.expects_incident:
        dw.faults = base.faults = 1
        dw_hits = [a for a in night.alarms if _is_related(a.asset, night)]
        base_hits = [
            a for a in night.baseline_alarms if _is_related(a["asset"], night) and not a.get("rescored")
        ]
        dw.detected, base.detected = int(bool(dw_hits)), int(bool(base_hits))
        # A failed job is loud whatever watches it (Elementary's own run-result alerts included).
        failed_run = night.run_status not in ("completed", "skipped")
        dw.failed_run_faults = base.failed_run_faults = int(failed_run)
        dw.failed_run_detected, base.failed_run_detected = (
            dw.detected * failed_run,
            base.detected * failed_run,
        )
        dw_ttd = min((a.at - night.run_ended_at).total_seconds() for a in dw_hits) if dw_hits else None
        base_ttd = (
            min((a["recorded_at"] - night.run_ended_at).total_seconds() for a in base_hits)
            if base_hits
            else None
        )
        dw.ttd += [dw_ttd] if dw_ttd is not None else []
        base.ttd += [base_ttd] if base_ttd is not None else []
        if dw_ttd is not None and base_ttd is not None:
            dw.ttd_both.append(dw_ttd)
            base.ttd_both.append(base_ttd)
        # Every expected incident names its classes (model.py); a right class on an incident whose findings
        # are all on unrelated tables found something else, not the fault. A night that continues an earlier
        # incident is scored on that one; any other on the incidents it opened. A key of several columns is
        # named one label per column that fails to match, so an expected key is any one of them.
        candidates = [
            i for i in night.incidents
            if i.continued == bool(night.expected_joins) and any(_is_related(a, night) for a in i.assets)
        ]  # fmt: skip
        dw.diagnosable = 1
        dw.correct = int(
            any(
                _right_class(i.classification, night.expected_classes)
                and set(night.expected_keys) <= {c for k in i.cause_keys for c in split_labels(k)}
                for i in candidates
            )
        )
        detail["root_cause"] = "correct" if dw.correct else "wrong"
        if not dw.correct:
            detail["root_cause_expected"] = {"class": night.expected_classes, "keys": night.expected_keys}
            detail["root_cause_got"] = [
                {"incident": i.incident_id, "class": i.classification, "keys": i.cause_keys,
                 "continued": i.continued, "related": any(_is_related(a, night) for a in i.assets)}
                for i in night.incidents
            ]  # fmt: skip
        detail.update(dw_detected=bool(dw.detected), baseline_detected=bool(base.detected))
    if night.expected_joins is not None:
        dw.lifecycle_scored = 1
        related = [i for i in night.incidents if any(_is_related(a, night) for a in i.assets)]
        opened = [i for i in related if not i.continued]
        continued = [i for i in related if i.continued]
        ok = bool(continued) and not opened if night.expected_joins else bool(opened)
        dw.lifecycle_correct = int(ok)
        detail["lifecycle"] = (
            "correct" if ok else
            f"wrong: expected {'to continue an open incident' if night.expected_joins else 'a new incident'}, "
            f"got {len(opened)} new and {len(continued)} continued"
        )  # fmt: skip
    if dw.false_alarms or base.false_alarms:
        detail.update(dw_false_alarms=dw.false_alarms, baseline_false_alarms=base.false_alarms)
    if dw.warnings:
        detail["dw_warnings"] = dw.warnings
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
            {
                "name": report.name,
                "world": report.world,
                "nights": len(report.nights),
                "details": details,
                **{name: f.as_dict() for name, f in figures.items()},
            }  # fmt: skip
        )
    worlds = sorted({r.world for r in reports})
    return {
        "scenarios": scenarios,
        "worlds": worlds,
        "total": {name: f.as_dict() for name, f in total.items()},
    }


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.0f}%"


def format_score(score: dict[str, Any]) -> str:
    t = score["total"]
    dw, base = t[DW], t[BASELINE]

    def ttd(f: dict[str, Any], which: str = "") -> str:
        med, top = f[f"time_to_detect{which}_median_s"], f[f"time_to_detect{which}_max_s"]
        return "n/a" if med is None else f"{med:.1f} s median, {top:.1f} s max"

    def recall(f: dict[str, Any], which: str = "") -> str:
        found, faults = (
            (f["detected"], f["faults"]) if not which else (f[f"{which}_detected"], f[f"{which}_faults"])
        )
        return f"{found}/{faults} ({_pct(_ratio(found, faults))})"

    errored = score.get("errored", [])
    lines = [
        f"{len(score['scenarios'])} scenarios over {len(score['worlds'])} worlds ({', '.join(score['worlds'])})",
        *(
            [
                f"{len(errored)} more scenarios errored and are not in these figures (the score is incomplete):",
                *(f"- {e['name']} ({e['path']}): {e['error']}" for e in errored),
            ]
            if errored
            else []
        ),
        "",
        f"| | {DW} | {BASELINE} (abs z > 3 over 14 days back, the last 2 days scored) |",
        "|---|---|---|",
        f"| recall | {recall(dw)} | {recall(base)} |",
        f"| recall, Coalesce job failed | {recall(dw, 'failed_run')} | {recall(base, 'failed_run')} |",
        f"| recall, silent (job green, or no run) | {recall(dw, 'silent')} | {recall(base, 'silent')} |",
        f"| false alarms per 100 table-nights | {dw['false_alarms_per_100_table_nights'] or 0:.2f} "
        f"({dw['false_alarms']} of {dw['table_nights']}) | {base['false_alarms_per_100_table_nights'] or 0:.2f} "
        f"({base['false_alarms']} of {base['table_nights']}) |",
        f"| root-cause accuracy | {dw['root_cause_correct']}/{dw['root_cause_scored']} "
        f"({_pct(dw['root_cause_accuracy'])}) | n/a (no diagnosis) |",
        f"| lifecycle: nights that continued or opened an incident as expected | {dw['lifecycle_correct']}/"
        f"{dw['lifecycle_scored']} ({_pct(dw['lifecycle_accuracy'])}) | n/a (no incidents) |",
        f"| WARN findings on nights that allow them (table-nights, not false alarms) | {dw['warnings']} | - |",
        f"| time to detect, the {dw['both_detected']} faults both detected (run end -> first alarm) "
        f"| {ttd(dw, '_both')} | {ttd(base, '_both')} |",
        f"| time to detect, every fault it detected | {ttd(dw)} ({dw['detected']}) | {ttd(base)} ({base['detected']}) |",
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
    wrong = [(s["name"], d) for s in score["scenarios"] for d in s["details"] if "root_cause_expected" in d]
    if wrong:
        lines += ["", "Wrong root causes (what was expected, what the diagnosis said):", ""]
        for name, d in wrong:
            expected = d["root_cause_expected"]
            got = "; ".join(_said(i) for i in d["root_cause_got"]) or "no incident opened"
            lines.append(
                f"- {name}, night {d['night']}: expected {' or '.join(expected['class'])}"
                f"{_keys(expected['keys'])}; got {got}"
            )
    lifecycle = [
        (s["name"], d)
        for s in score["scenarios"]
        for d in s["details"]
        if d.get("lifecycle", "correct") != "correct"
    ]
    if lifecycle:
        lines += ["", "Lifecycle misses:", ""]
        lines += [f"- {name}, night {d['night']}: {d['lifecycle']}" for name, d in lifecycle]
    return "\n".join(lines)


def _keys(keys: list[str]) -> str:
    return f" on {', '.join(keys)}" if keys else ""


def _said(i: dict[str, Any]) -> str:
    where = "" if i["related"] else ", on unrelated tables"
    how = " (continued)" if i["continued"] else ""
    return (
        f"{i['incident']}{how}: {i['class'] or 'not diagnosed'}{_keys(i['keys']) or ' with no keys'}{where}"
    )
