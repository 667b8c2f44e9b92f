"""What a person meets at the local world's commands when something is off or done: `world up` on a taken
port, `world down` on a `world up` with its UI (in the background), `slack click` on what does not exist,
`slack log`'s ts, seeding's "night n of N", the README's click step. One line each, never a traceback."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from cli_runner import run_cli
from reference_night import reference_incident, reference_plan

from dw_dagster.notifications.proposal_message import proposal_messages
from dw_local.slack_render import render_message
from dw_local.world import LOCAL_SLACK_TOKEN, LocalWorld, PortInUse, WorldPorts

REPO = Path(__file__).resolve().parents[2]


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# -- slack click and slack log ----------------------------------------------------------------------------


def _post(lw: LocalWorld, **body) -> dict:
    headers = {"Authorization": f"Bearer {LOCAL_SLACK_TOKEN}"}
    return httpx.post(f"{lw.slack_url}/api/chat.postMessage", headers=headers, json=body).json()


@pytest.fixture(scope="module")
def slack_world(tmp_path_factory):
    """The Slack stand-in alone, holding an incident message and a proposal reply with its buttons."""
    with LocalWorld(tmp_path_factory.mktemp("slack") / "local", services=("slack",)) as lw:
        root = _post(lw, channel="#inventory-analytics", text="Incident INC-1")
        blocks = [
            {"type": "header", "text": {"type": "plain_text", "text": "Proposed fix · INC-1"}},
            {"type": "actions", "elements": [
                {"type": "button", "action_id": "dw_approve", "text": {"type": "plain_text", "text": "Approve"}, "value": "{}"},
                {"type": "button", "action_id": "dw_open_run", "text": {"type": "plain_text", "text": "Run"}, "url": "http://localhost:3000/runs/r1"},
            ]},
        ]  # fmt: skip
        reply = _post(lw, channel=root["channel"], thread_ts=root["ts"], text="Proposed fix", blocks=blocks)
        yield lw, root["ts"], reply["ts"]


def test_slack_click_on_what_does_not_exist_names_what_does_in_one_line(slack_world, tmp_path):
    lw, plain, proposal = slack_world
    listed = f'the latest messages with buttons: {proposal} (#inventory-analytics, "Proposed fix · INC-1"): Approve, Run'
    cases = {
        "1.000001": f"no message has ts 1.000001 in the local Slack; {listed}",
        plain: f'message {plain} (#inventory-analytics, "Incident INC-1") has no buttons; {listed}',
        proposal: f'message {proposal} (#inventory-analytics, "Proposed fix · INC-1") has no button "Aprove"; '
        'its buttons: "Approve" (dw_approve), "Run" (dw_open_run)',
    }
    for ts, line in cases.items():
        out = run_cli(
            "slack",
            "click",
            ts,
            "--as",
            "U0INVAN01",
            "--button",
            "Aprove",
            "--root",
            str(lw.root),
            cwd=tmp_path,
        )
        assert (out.returncode, out.stdout, out.stderr) == (2, "", f"Error: {line}\n")
    # The app's Request URL not set: what went wrong, in one line, exit code 1.
    out = run_cli("slack", "click", proposal, "--as", "U0INVAN01", "--root", str(lw.root), cwd=tmp_path)
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "no Request URL" in out.stderr
    # No world there at all: the same, for every command of the local world.
    nowhere = tmp_path / "nowhere"
    for args in (
        ["slack", "click", proposal, "--as", "U0INVAN01"],
        ["world", "night"],
        ["world", "deploy-fix", "INC-1"],
    ):
        out = run_cli(*args, "--root", str(nowhere), cwd=tmp_path)
        assert (out.returncode, out.stderr) == (
            1,
            f"Error: no local world is running under {nowhere}: run `dw-dagster world up`\n",
        )


def test_slack_log_prints_each_messages_ts_for_slack_click(slack_world, tmp_path):
    lw, plain, proposal = slack_world
    out = run_cli("slack", "log", "--root", str(lw.root), "--tz", "UTC", cwd=tmp_path)
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and re.fullmatch(rf"\[[0-9: -]+ UTC\] ts {re.escape(plain)}", lines[1])
    assert any(
        re.fullmatch(rf"  ↳ \[[0-9: -]+ UTC\] reply · ts {re.escape(proposal)}", line) for line in lines
    )
    assert "[Approve] [Run → http://localhost:3000/runs/r1]" in out.stdout


def test_the_readme_click_step_names_the_reply_that_carries_the_buttons():
    readme = (REPO / "README.md").read_text()
    walkthrough = readme[readme.index("## The reference night, end to end") : readme.index("## Commands")]
    step = walkthrough[walkthrough.index("clicks Approve in Slack") : walkthrough.index("--as U0INVAN01")]
    assert "dw-dagster slack log --channel '#inventory-analytics'" in step and "slack click <that ts>" in step
    title = re.search(r'the "([^"]+)" reply', step).group(1)
    inc = reference_incident()
    (reply,) = proposal_messages(inc, reference_plan(inc.incident_id), run_id="r1")
    shown = render_message(reply.payload())
    assert title in shown.splitlines()[0], "the reply is titled as the README says"
    for button in re.findall(r"\[(\w+)\]", step):
        assert f"[{button}]" in shown


# -- world up on a taken port -----------------------------------------------------------------------------


def _hold(port: int) -> socket.socket | None:
    """Listens on ``port`` (``None`` if another process already does)."""
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", port))
    except OSError:
        holder.close()
        return None
    holder.listen()
    return holder


def test_world_up_on_a_taken_port_says_which_by_what_and_what_to_do(tmp_path):
    snowflake = _hold(47101)
    try:
        out = run_cli(
            "world",
            "up",
            "--no-ui",
            "--root",
            str(tmp_path / "local"),
            "--cache",
            str(tmp_path / "c"),
            cwd=tmp_path,
        )
    finally:
        if snowflake:
            snowflake.close()
    assert len(out.stderr.splitlines()) == 1, out.stderr
    line = out.stderr.strip()
    assert (
        out.returncode == 1
        and out.stdout == ""
        and line.startswith("Error: port 47101 (the local Snowflake) is in use by pid ")
    )
    assert line.endswith("--free-ports` picks free ports")
    if snowflake:
        assert f" by pid {os.getpid()} (" in line and line.endswith(
            "; stop it, or `dw-dagster world up --free-ports` picks free ports"
        )
    assert not (tmp_path / "local").exists() and not (tmp_path / "c").exists(), "checked before seeding"
    ui = socket.socket()
    ui.bind(("127.0.0.1", 0))
    ui.listen()
    port = ui.getsockname()[1]
    out = run_cli(
        "world", "up", "--free-ports", "--ui-port", str(port), "--root", str(tmp_path / "local"), cwd=tmp_path
    )
    ui.close()
    assert out.returncode == 1 and out.stderr == (
        f"Error: port {port} (the Dagster UI) is in use by pid {os.getpid()} ({_cmdline()}); "
        "`--ui-port PORT` picks another port for the UI\n"
    )


def _cmdline() -> str:
    return Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()[:100]


def test_a_port_held_by_another_local_world_names_that_world(tmp_path):
    with LocalWorld(tmp_path / "a", services=("slack",)) as a:
        b = LocalWorld(tmp_path / "b", ports=WorldPorts(slack=a.ports.slack), services=("slack",))
        with pytest.raises(PortInUse) as e:
            b.start()
        pid = a._procs["slack"].pid
    assert e.value.holder_root == a.root and not (tmp_path / "b").exists()
    assert str(e.value).startswith(f"port {a.ports.slack} (the Slack stand-in) is in use by pid {pid} (")
    assert str(e.value).endswith(f", a server of the local world under {a.root}")


# -- world down on a world up with its UI -----------------------------------------------------------------

# As `world up` runs the UI, in the background after Dagster ran in it: SIGINT and SIGTERM ignored (and so
# inherited ignored by whatever it starts). The UI starts a process of its own, as `dg dev` starts its
# webserver and daemon.
OWNER = """
import os, signal, sys
from pathlib import Path
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
from dw_local.cli import run_ui
from dw_local.world import LocalWorld
from dw_local import forkserver
lw = LocalWorld(Path(sys.argv[1]), services=("slack",), command="world up").start()
print(forkserver._server.folder, flush=True)
ui = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"
try:
    run_ui(lw, [sys.executable, "-c", ui], dict(os.environ), Path.cwd())
finally:
    lw.stop()
"""


def _group(pgid: int) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and int((proc / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_world_down_stops_the_ui_and_the_world_up_running_it_in_the_background(tmp_path):
    root = tmp_path / "local"
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(root)], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = json.loads((root / "world.json").read_text()) if (root / "world.json").exists() else {}
            ui = state.get("pids", {}).get("dagster-ui")
            if ui and len(_group(ui)) == 2:
                break
            time.sleep(0.1)
        processes = [*_group(ui), state["pids"]["slack"]]
        down = run_cli("world", "down", "--root", str(root), cwd=tmp_path)
        assert (down.returncode, down.stdout) == (0, "stopped: dagster-ui, slack, world up\n"), down.stderr
        out, err = owner.communicate(timeout=60)
    finally:
        owner.kill()
    assert owner.returncode == 0 and "the Dagster UI ended" in out, err
    assert not Path(out.splitlines()[0]).exists(), "the fork server's temp folder goes when world up ends"
    assert not [p for p in processes if _running(p)] and not (root / "world.json").exists()
    assert (
        run_cli("world", "down", "--root", str(root), cwd=tmp_path).stdout
        == f"no world running under {root}\n"
    )


# As `dg dev` runs: on Ctrl-C it stops what it started (the webserver and the daemon), then the code server;
# a process of its group that got the SIGINT itself says so.
UI_LEADER = """
import signal, subprocess, sys, time
from pathlib import Path
out = Path(sys.argv[1])
child = subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[1]])
try:
    time.sleep(600)
except KeyboardInterrupt:
    (out / "leader").write_text("SIGINT")
    child.terminate()
    child.wait(30)
"""
UI_CHILD = """
import signal, sys, time
from pathlib import Path
out = Path(sys.argv[1])
def record(sig, _):
    (out / "child").write_text(signal.Signals(sig).name)
    sys.exit(0)
signal.signal(signal.SIGINT, record)
signal.signal(signal.SIGTERM, record)
(out / "ready").write_text("")
time.sleep(600)
"""
CTRL_C_OWNER = """
import sys
from pathlib import Path
from dw_local.cli import run_ui
from dw_local.world import LocalWorld
lw = LocalWorld(Path(sys.argv[1]), services=("slack",), command="world up").start()
try:
    run_ui(lw, [sys.executable, "-c", sys.argv[3], sys.argv[2], sys.argv[4]], {}, Path.cwd())
finally:
    lw.stop()
"""


def test_ctrl_c_reaches_the_ui_alone_which_stops_what_it_started(tmp_path):
    """`dg dev` stops its daemon before the code server the daemon reads; a SIGINT to its whole group let the
    code server end first and the daemon's next tick print a traceback (cli.py, ``run_ui``)."""
    out = tmp_path / "signals"
    out.mkdir()
    owner = subprocess.Popen(
        [sys.executable, "-c", CTRL_C_OWNER, str(tmp_path / "local"), str(out), UI_LEADER, UI_CHILD],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (out / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        owner.send_signal(signal.SIGINT)  # Ctrl-C in world up's terminal
        _, err = owner.communicate(timeout=60)
    finally:
        owner.kill()
    assert (out / "leader").read_text() == "SIGINT", err
    assert (out / "child").read_text() == "SIGTERM", "only the UI's own process gets the Ctrl-C"


# -- seeding ----------------------------------------------------------------------------------------------


def test_seeding_says_night_n_of_n(tmp_path):
    from dw_local.seeding import seed_history
    from dw_local.worlds.distributor.generator import DistributorWorld

    lines: list[str] = []
    with LocalWorld(tmp_path / "w") as lw:
        seed_history(DistributorWorld(), lw, 1, progress=lines.append)
    assert lines == ["  night 1 of 1 (2025-04-16): run completed, watched"]


def test_a_world_never_takes_another_worlds_snowflake_for_its_own(tmp_path):
    """Free ports are picked, then bound: a world whose Snowflake port another world's server took in between
    is told so by name, not handed the other world's data (a TCP connect was its only check before)."""
    with LocalWorld(tmp_path / "a", services=("snowflake",)) as a:
        b = LocalWorld(tmp_path / "b", ports=WorldPorts(snowflake=a.ports.snowflake), services=("snowflake",))
        assert a._snowflake_up()
        with pytest.raises(PortInUse, match=rf"port {a.ports.snowflake}: another local Snowflake answers"):
            b._snowflake_up()
        # A port picked free and taken by another world before the bind is picked again: the world starts.
        c = LocalWorld(tmp_path / "c", services=("snowflake",))
        c.ports.snowflake = a.ports.snowflake
        with c:
            assert c.ports.snowflake != a.ports.snowflake and c._snowflake_up()
