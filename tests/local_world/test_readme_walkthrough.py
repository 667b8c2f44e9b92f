"""README's walkthrough, followed literally: `dw-dagster world up` (the UI and its daemon, `dg dev`), then in a
second shell the world's environment and the commands README lists, in order, through the receipt.

What a person must meet: no traceback anywhere, no incident the night did not cause (the daemon's freshness
and skipped-run checks run on the world's clock all along), a console that is not a stream of sensor ticks,
and the click step found from `slack log`'s own output. (A run's events still reach the console at DEBUG
from its worker: the runs' console logger level is the code location's, not the local world's.) Two deviations from the README's text, both forced
by a shared test machine: free ports (`--free-ports`, `--ui-port`) and the shared template cache (`--cache`).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from world_cache import WORLD_CACHE

from dw_local.world import free_port

pytestmark = [pytest.mark.world, pytest.mark.timeout(1800)]
DW_DAGSTER = str(Path(sys.executable).parent / "dw-dagster")
INCIDENT = "INC-20250616-7035b2"
HEADING_TS = re.compile(r"\bts (\d{9,10}\.\d{6})\b")
READS = ("list", "proposals", "incidents", "show_typo", "approve_typo", "baseline_typo")
"""The steps that only read the ops schema (and the lookups of `approve` and `baseline accept`): what a person
types during an incident, which answers without importing Dagster or pandas."""


def _until(what: str, probe, ceiling: float, every: float = 3.0):
    """``probe()`` until it returns something truthy; a ceiling on every wait."""
    deadline = time.monotonic() + ceiling
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"{what}: not within {ceiling:.0f} s")


@dataclass
class Walkthrough:
    shell: dict[str, str]
    outputs: dict[str, subprocess.CompletedProcess] = field(default_factory=dict)
    console: str = ""
    stopping: str = ""
    """The end of ``console``: what it printed after Ctrl-C."""
    click_ts: str | None = None
    freshness: dict[str, str] = field(default_factory=dict)

    def run(self, name: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        # Each process lists what it imported (Python's -X importtime, on stderr): see READS below.
        env = {**self.shell, "PYTHONPROFILEIMPORTTIME": "1"} if name in READS else self.shell
        done = subprocess.run([DW_DAGSTER, *args], env=env, cwd=self.shell["PWD"], capture_output=True,
                              text=True, timeout=600)  # fmt: skip
        self.outputs[name] = done
        if check:
            assert done.returncode == 0, f"dw-dagster {' '.join(args)}: {done.stdout}{done.stderr}"
        return done


def _held_reply_ts(log: str) -> str | None:
    """The ts `slack log` prints for the message with the Approve button: the ts on the heading line of the
    message whose lines hold ``[Approve]`` (each heading says ``ts <ts>``)."""
    ts = None
    for line in log.splitlines():
        heading = HEADING_TS.search(line)
        if heading:
            ts = heading.group(1)
        if "[Approve]" in line:
            return ts
    return None


def _this_checkouts_paths(pythonpath: str) -> str:
    checkout = Path(__file__).resolve().parents[2]
    kept = [p for p in pythonpath.split(os.pathsep) if p and Path(p).resolve().is_relative_to(checkout)]
    return os.pathsep.join(kept)


@pytest.fixture(scope="module")
def walkthrough(seeded_template, tmp_path_factory):
    """README's commands, in order, on a fresh world; the outputs by step."""
    home = tmp_path_factory.mktemp("walkthrough")
    ui_port = free_port()
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("COALESCE_", "SNOWFLAKE_", "SLACK_", "DW_", "DAGSTER_", "PYTHONPATH"))}  # fmt: skip
    # A checkout tested with another checkout's venv puts its own code first with PYTHONPATH: kept (only its
    # entries inside this checkout), or the commands would run the venv's code, not the code under test.
    if ours := _this_checkouts_paths(os.environ.get("PYTHONPATH", "")):
        clean["PYTHONPATH"] = ours
    console = home / "world-up.log"
    with open(console, "w") as out:
        up = subprocess.Popen(
            [DW_DAGSTER, "world", "up", "--free-ports", "--ui-port", str(ui_port), "--cache", str(WORLD_CACHE.resolve())],
            cwd=home, env=clean, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        _until("the Dagster UI", lambda: up.poll() is None and _ui_up(ui_port) or _died(up, console), 900)
        # The second shell: set -a; . .dw/local/world.env; set +a; PATH=.venv/bin:$PATH
        env_file = home / ".dw" / "local" / "world.env"
        shell = {**clean, "PWD": str(home),
                 **{k: shlex.split(v)[0] for k, v in (line.split("=", 1) for line in env_file.read_text().splitlines())}}  # fmt: skip
        w = Walkthrough(shell)
        w.run("night", "world", "night", "--reference")

        # The daemon's sensors take it from there: the incident, its diagnosis, the proposal, the remediation
        # run held for approval, whose proposal is posted with the Approve button. Waited for on the Slack
        # stand-in's own messages (an HTTP read: a `dw-dagster` process a poll cost ~0.7 s of CPU, about a
        # third of this test's), then README's commands once each, `slack log` among them.
        slack_url = shell["SLACK_BASE_URL"].removesuffix("/api/")

        def posted(channel: str, *needles: str) -> bool:
            got = httpx.get(f"{slack_url}/_sink/messages", params={"channel": channel}, timeout=10).json()
            text = json.dumps(got["messages"])
            return all(n in text for n in needles)

        _until(
            "the held run's proposal in Slack",
            lambda: posted("#inventory-analytics", INCIDENT, "dw_approve"),
            900,
        )
        log = w.run("log_held", "slack", "log", "--channel", "#inventory-analytics").stdout
        assert "[Approve]" in log and INCIDENT in log, log
        assert INCIDENT in w.run("list", "incidents", "list").stdout
        w.run("proposals", "proposals", INCIDENT)
        w.click_ts = _held_reply_ts(log)
        if w.click_ts:  # "or as Priya clicks Approve in Slack"
            w.run("approve_priya", "slack", "click", w.click_ts, "--as", "U0INVAN01")
        else:
            w.run("approve_priya", "approve", INCIDENT, "--as", "Priya Raman")
        w.run("approve_dana", "approve", INCIDENT, "--as", "Dana Ortiz", "--set", "WAREHOUSE_NAME=Dallas")
        w.run("deploy_fix", "world", "deploy-fix", INCIDENT)
        _until("the receipt in #planning-ops", lambda: posted("#planning-ops", "Receipt"), 900)
        w.run("log", "slack", "log", "--channel", "#planning-ops")
        w.run("incidents", "incidents", "list", "--json")
        w.run("cost", "cost", "report", "--json")  # its default dates: the world's last week
        # Names a person mistypes are answered with the closest that exist.
        w.run("show_typo", "incidents", "show", INCIDENT[:-1] + "3", check=False)
        w.run("approve_typo", "approve", INCIDENT[:-1] + "3", "--as", "Priya Raman", check=False)
        w.run("baseline_typo", "baseline", "accept", "mart/mart_reorder_candidate", "--as", "Omar Haddad",
              "--reason", "walkthrough", check=False)  # fmt: skip
    finally:
        before_stop = console.read_text()
        os.killpg(up.pid, signal.SIGINT)  # Ctrl-C, as README says
        try:
            up.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
        subprocess.run([DW_DAGSTER, "world", "down"], cwd=home, env=clean, capture_output=True, timeout=120)
    printed = console.read_text()
    w.console, w.stopping = printed, printed[len(before_stop) :]
    w.freshness = _freshness(home / ".dw" / "local" / "dagster_home")
    return w


def _freshness(dagster_home: Path) -> dict[str, str]:
    """The freshness states the UI's daemon left (its freshness policies judged on the world's clock)."""
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(dagster_home))) as instance:
        keys = [
            dg.AssetKey.from_user_string(k)
            for k in ("inventory/fct_inventory_position", "mart/mart_days_of_supply")
        ]
        records = instance.get_freshness_state_records(keys)
        return {k.to_user_string(): r.freshness_state.value for k, r in records.items()}


def _ui_up(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/server_info", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _died(proc: subprocess.Popen, console: Path) -> bool:
    if proc.poll() is not None:
        raise AssertionError(f"world up exited with {proc.returncode}:\n{console.read_text()[-3000:]}")
    return False


def test_nothing_opens_that_the_night_did_not_cause(walkthrough):
    incidents = json.loads(walkthrough.outputs["incidents"].stdout)
    assert [i["incident_id"] for i in incidents] == [INCIDENT], [
        (i["incident_id"], i["title"]) for i in incidents
    ]
    assert incidents[0]["status"] == "resolved"


def test_the_freshness_policies_pass_on_the_worlds_clock(walkthrough):
    # On today's clock the fact table was built "a year ago" and its policy failed, which opened a false
    # "Coalesce job did not run" incident.
    assert walkthrough.freshness == {
        "inventory/fct_inventory_position": "PASS",
        "mart/mart_days_of_supply": "PASS",
    }, walkthrough.freshness


def test_the_thread_reads_down_to_the_receipt_on_the_worlds_dates(walkthrough):
    log = walkthrough.outputs["log"].stdout
    assert "Dana Ortiz" in log and "Receipt" in log and "Verification passed" in log
    # One clock: every time the thread shows is the world's night, not today's.
    shown = re.findall(r"\b(20\d\d)-\d\d-\d\d \d\d:\d\d", log)
    assert shown and set(shown) == {"2025"}, sorted(set(shown))


def test_cost_report_defaults_to_the_worlds_days(walkthrough):
    attribution = json.loads(walkthrough.outputs["cost"].stdout)
    assert attribution["queries"] > 0 and attribution["total_credits"] > 0, attribution


def test_no_traceback_and_a_quiet_console(walkthrough):
    # The world signs the product in by key pair, as the product advises: no process warns of a password.
    for name, done in walkthrough.outputs.items():
        assert "Traceback" not in done.stdout + done.stderr, name
        assert "sign-in by password" not in done.stdout + done.stderr, name
    console = walkthrough.console
    running = console[: len(console) - len(walkthrough.stopping)]
    assert "Traceback" not in running and "BetaWarning" not in console, running[-3000:]
    # Ctrl-C reaches dagster dev's daemon and its code server at once: a sensor tick the daemon had begun may
    # find the code location already gone (Dagster's own shutdown, nothing of the product's). Any other
    # error while stopping is a fault.
    tracebacks = walkthrough.stopping.split("Traceback (most recent call last):")[1:]
    assert all(
        "DagsterCodeLocationNotFoundError: Location dw_dagster does not exist" in t for t in tracebacks
    ), walkthrough.stopping[-3000:]
    assert "sign-in by password" not in console, console[-3000:]
    # The world's clock moves a night at a time: no process takes that for a missed heartbeat (a code server
    # shut itself down on it, a daemon warned that its threads hung).
    assert "No heartbeat received" not in console and "have not sent heartbeats" not in console
    # The template was built before (the fixture's): world up copies it and says so, not "7 minutes".
    assert "copying the seeded world (60 nights of history) from " in console
    assert "about 7 minutes" not in console
    # The daemon's ticks are in the UI, not a console line each (dozens a minute at INFO before).
    ticks = [line for line in console.splitlines() if re.search(r"dagster\.daemon\.\w*Daemon\W.*INFO", line)]
    assert ticks == [], ticks[:5]


def test_a_mistyped_name_is_answered_with_the_closest(walkthrough):
    show = walkthrough.outputs["show_typo"]
    assert show.returncode != 0 and "no such incident 'INC-20250616-7035b3'" in show.stderr
    assert f"closest: {INCIDENT}" in show.stderr
    typo = walkthrough.outputs["baseline_typo"]
    assert typo.returncode != 0 and "closest: mart/mart_reorder_candidates" in typo.stderr, typo.stderr


def _imported(stderr: str) -> set[str]:
    """The top-level packages a process imported, from its -X importtime lines."""
    return {
        line.rsplit("|", 1)[-1].strip().split(".")[0]
        for line in stderr.splitlines()
        if line.startswith("import time:")
    }


def test_what_a_person_types_during_an_incident_imports_neither_dagster_nor_pandas(walkthrough):
    # Each loaded Dagster (and the connector pandas), 6-12 s a command on a busy machine (issue 27);
    # they read the ops schema from the same settings without them (benchmarks/bench_cli_commands.py).
    for name in READS:
        done = walkthrough.outputs[name]
        imported = _imported(done.stderr)
        assert "dw_dagster" in imported and "snowflake" in imported, (name, sorted(imported))
        assert not imported & {"dagster", "pandas"}, (name, sorted(imported & {"dagster", "pandas"}))
    typo = walkthrough.outputs["approve_typo"]
    assert typo.returncode != 0 and "no such incident 'INC-20250616-7035b3'" in typo.stderr
    assert f"closest: {INCIDENT}" in typo.stderr


def test_the_click_step_is_found_from_slack_logs_own_output(walkthrough):
    assert walkthrough.click_ts, "slack log printed no ts for the message with the Approve button"
    assert (
        "(dw_approve)" in walkthrough.outputs["approve_priya"].stdout
        and "answered 200" in walkthrough.outputs["approve_priya"].stdout
    )
