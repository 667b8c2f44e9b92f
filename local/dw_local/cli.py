"""``dw-dagster world|slack`` commands: bring the local world up and down, read the Slack stand-in.

Named in the ``dw_dagster.app.cli`` entry-point group; ``dw-dagster`` imports this module only when one of its
commands is called.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import click

from dw_local.world import LocalWorld, WorldPorts

DEFAULT_ROOT = Path(".dw/local")
WORKSPACE_YAML = Path(__file__).resolve().parents[2] / "workspace.yaml"
DEFAULT_CACHE = Path(".dw/cache")
DEFAULT_PORTS = {"snowflake": 47101, "coalesce": 47102, "slack": 47103}


class WorldCommands(click.Group):
    """The local world's commands: a ``WorldError`` (no world running, a server that did not start) is one
    line naming what went wrong, never a traceback."""

    def invoke(self, ctx: click.Context):
        from dw_local.world import WorldError

        try:
            return super().invoke(ctx)
        except WorldError as e:
            raise CommandError(str(e)) from None


@click.group(cls=WorldCommands)
def world() -> None:
    """The embedded local world: local Snowflake, Coalesce simulator, Slack stand-in."""


@world.command("up")
@click.option("--root", type=click.Path(path_type=Path), default=DEFAULT_ROOT, show_default=True)
@click.option("--ui-port", type=int, default=3000, show_default=True)
@click.option("--no-ui", is_flag=True, help="Start, seed and run tonight's job, then leave the servers up.")
@click.option("--fresh", is_flag=True, help="Delete the world's data first and start from the seeded copy.")
@click.option(
    "--cache",
    type=click.Path(path_type=Path),
    default=DEFAULT_CACHE,
    show_default=True,
    help="Where the seeded world is cached (keyed by a hash of what shapes it).",
)
@click.option("--free-ports", is_flag=True, help="Pick free ports instead of the defaults (47101-47103).")
def world_up(root: Path, ui_port: int, no_ui: bool, fresh: bool, cache: Path, free_ports: bool) -> None:
    """Start the servers, seed 60 nights of history once, run tonight's job, then open the Dagster UI.
    Ctrl-C, or `dw-dagster world down` from another shell (for a `world up` in the background too), stops
    the UI and the servers."""
    from dw_local.world import PortInUse

    try:
        _world_up(root.resolve(), ui_port, no_ui, fresh, cache.resolve(), free_ports)
    except PortInUse as e:
        if e.what == UI_SERVICE:
            advice = "`--ui-port PORT` picks another port for the UI"
        elif e.holder_root is not None:
            advice = (
                f"`dw-dagster world down --root {e.holder_root}` stops it, or `--free-ports` picks free ports"
            )
        else:
            advice = "stop it, or `dw-dagster world up --free-ports` picks free ports"
        raise CommandError(f"{e}; {advice}") from None


UI_SERVICE = "the Dagster UI"


def _world_up(root: Path, ui_port: int, no_ui: bool, fresh: bool, cache: Path, free_ports: bool) -> None:
    from dw_local.seeding import Template, play_tonight
    from dw_local.world import check_port

    if LocalWorld.read_state(root):
        LocalWorld.stop_running(root)
    ports = WorldPorts() if free_ports else WorldPorts(**DEFAULT_PORTS)
    # clock: every process the world starts reads the world's clock (world_clock.py), not today's.
    lw = LocalWorld(root, ports=ports, scheduler=True, outlive_parent=no_ui, command="world up", clock=True)
    # Before minutes of seeding: a port another process holds is named now.
    lw.check_ports()
    if not no_ui:
        check_port(ui_port, UI_SERVICE)
    if fresh and root.exists():
        shutil.rmtree(root)
    if not (root / "seeded.json").exists():
        template = Template(cache.resolve(), progress=click.echo)
        click.echo(
            f"copying the seeded world (60 nights of history) from {cache} ..."
            if template.built()
            else "seeding 60 nights of history: the Coalesce job runs each night and dw-dagster watches it "
            f"(about 7 minutes on 2 cores, once; cached under {cache}) ..."
        )
        shutil.rmtree(root, ignore_errors=True)
        template.clone(root)
    click.echo(f"starting the local world under {root} ...")
    lw.start()
    try:
        _start_approvals_endpoint(lw)
        night, outcome = play_tonight(lw)
        failed = [f"{c.check} on {c.asset}" for c in outcome.failed()]
        click.echo(
            f"night {night.night} ({night.business_date}): Coalesce job inventory_nightly run {night.run_id} "
            f"{night.status}; {len(outcome.checks)} checks, {len(failed)} failed {failed or ''}"
        )
        secrets = {"COALESCE_API_TOKEN", "SNOWFLAKE_PASSWORD", "SLACK_BOT_TOKEN", *_password_variables(lw)}
        for key, value in lw.env().items():
            if key not in secrets and not any(s in key for s in ("TOKEN", "PASSWORD", "SECRET", "KEY")):
                click.echo(f"  {key}={value}")
        env_file = _write_env_file(lw)
        click.echo(
            f"for dw-dagster commands in another shell (approve, proposals, stop): set -a; . {env_file}; set +a"
        )
        if no_ui:
            click.echo(f"servers are up; `dw-dagster world down --root {root}` stops them")
            return
        _run_dagster_dev(lw, ui_port)
    except BaseException:
        lw.stop()
        raise
    lw.stop()


def _start_approvals_endpoint(lw: LocalWorld) -> None:
    from dw_local.daemon import dagster_home
    from dw_local.interactivity import start_endpoint
    from dw_local.world_clock import clock_env

    url = start_endpoint(lw, dagster_home(lw.root), env=clock_env(lw.root))
    click.echo(f"Slack interactivity endpoint (the Approve and Reject buttons): {url}")


def _password_variables(lw: LocalWorld) -> set[str]:
    from dw_local.world import password_variables

    return password_variables(Path(lw.env()["DW_CONTEXT_FILE"]))


# The local ACCOUNT_USAGE views have no lag, so the nightly cost job need not wait its production 8 h.
_UI_ONLY_ENV = {"DW_COST_LATENCY_HOURS": "0"}
# The daemon warns that its threads hang when their last heartbeats are older than its tolerance (30 min) by
# the world's clock, which a night played moves a day ahead: above a night, the warning means a hang again.
_DAEMON_ENV = {"DAGSTER_DAEMON_HEARTBEAT_TOLERANCE": str(2 * 24 * 3600)}


def _write_env_file(lw: LocalWorld) -> Path:
    """The world's environment (its local servers' fixed credentials included) and its Dagster instance, in
    a file only this user can read, so a second shell can run dw-dagster against it without the secrets
    ever being printed."""
    from dw_local.daemon import dagster_home
    from dw_local.world_clock import clock_env

    path = lw.root / "world.env"
    # The world's clock too: the commands of that shell read the world's time, as its daemon does.
    env = {**lw.env(), **_UI_ONLY_ENV, "DAGSTER_HOME": str(dagster_home(lw.root)), **clock_env(lw.root, {})}
    path.touch(mode=0o600)
    path.write_text("".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items()))
    return path


def _run_dagster_dev(lw: LocalWorld, ui_port: int) -> None:
    from dw_local.daemon import dagster_home
    from dw_local.world_clock import clock_env

    # The same instance the seeding wrote: the UI shows every night's runs, checks and incidents, and its
    # sensor daemon resumes from the cursor the seeding and tonight's tick left there.
    home = dagster_home(lw.root)
    # On the world's clock: Dagster's freshness policies and dw-dagster's checks judge the world's night.
    env = {
        **os.environ,
        **lw.env(),
        **_UI_ONLY_ENV,
        **_DAEMON_ENV,
        "DAGSTER_HOME": str(home),
        **clock_env(lw.root),
    }
    click.echo(
        f"Dagster UI: http://localhost:{ui_port}  (Ctrl-C, or `dw-dagster world down --root {lw.root}` from "
        "another shell, stops the UI and the local world)"
    )
    # `dg dev` (what supersedes `dagster dev`) on workspace.yaml, which names the code location `dw_dagster`
    # as the UI shows it; started in DAGSTER_HOME, the instance's own dagster.yaml is the one in sight.
    dg = Path(sys.executable).parent / "dg"
    # The daemon logs every sensor tick at INFO (dozens of lines a minute): the console shows warnings and
    # errors; each tick is in the UI (Automation → the sensor's ticks).
    cmd = [str(dg), "dev", "-w", str(WORKSPACE_YAML), "-p", str(ui_port), "--log-level", "warning"]
    run_ui(lw, cmd, env, home)


UI_STOP_SECONDS = 90.0
"""How long `dg dev` has to stop after Ctrl-C: its own wait for the webserver and the daemon is 60 s."""


def run_ui(lw: LocalWorld, cmd: list[str], env: dict[str, str], cwd: Path) -> None:
    """Runs the world's UI (``cmd``) until it ends, in a process group of its own recorded in world.json as
    ``dagster-ui``: `world down` stops it with everything it started, and it dies with this process."""
    from dw_local.forkserver import child_setup
    from dw_local.world import stop_groups

    proc = subprocess.Popen(cmd, env=env, cwd=cwd, start_new_session=True, preexec_fn=child_setup(die=True))
    lw.add_process("dagster-ui", proc)
    try:
        code = proc.wait()
        click.echo(f"the Dagster UI ended (exit code {code}); stopping the local world")
    except KeyboardInterrupt:
        # Ctrl-C reaches this process only (the UI has a process group of its own). Passed to `dg dev` alone,
        # which tells the daemon and the webserver to stop, waits for them, then stops the code server they
        # read (dagster/_cli/dev.py). Sent to the whole group, as a terminal does, the code server could end
        # first, and the daemon's next sensor tick printed "Location dw_dagster does not exist in workspace"
        # with its traceback as the world stopped.
        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=UI_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            pass  # the group is stopped below
    finally:
        stop_groups([proc.pid])  # nothing of the UI outlives it


@world.command("night")
@click.option("--root", type=click.Path(path_type=Path), default=DEFAULT_ROOT, show_default=True)
@click.option("--reference", is_flag=True, help="The reference night: EBS opens DC7 (org 7120), unmapped.")
def world_night(root: Path, reference: bool) -> None:
    """Play the next night on the running world: its Coalesce job runs, and the Dagster daemon of `world up`
    watches it (run sensor, checks, incidents, diagnosis, proposals) as it would in production."""
    from dw_local.worlds.distributor.generator import DistributorWorld

    lw = LocalWorld.attach(root.resolve())
    world = DistributorWorld()
    coalesce = lw.coalesce_client()
    if reference:
        night = world.play_reference_night(lw.snowflake, coalesce)
    else:
        night = world.play_night(lw.snowflake, coalesce, world.last_played_night(lw.snowflake) + 1)
    marker = lw.root / "seeded.json"
    marker.write_text(json.dumps({"nights_played": night.night + 1}))
    click.echo(
        f"night {night.night} ({night.business_date}): Coalesce run {night.run_id} {night.status}; the daemon's "
        "sensors pick it up within a minute (Dagster UI: Runs, Assets → dw/incidents)"
    )


@world.command("deploy-fix")
@click.argument("incident_id")
@click.option("--root", type=click.Path(path_type=Path), default=DEFAULT_ROOT, show_default=True)
def world_deploy_fix(incident_id: str, root: Path) -> None:
    """Do what the node's owner does in the Coalesce app: apply the node change proposed for INCIDENT_ID to
    the workspace and deploy it (dw-dagster itself never edits nodes)."""
    from dw_dagster.app.operations import Operations
    from dw_local.engineer import apply_and_deploy
    from dw_local.world import LOCAL_COALESCE_TOKEN

    lw = LocalWorld.attach(root.resolve())
    os.environ.update(lw.env())
    book = Operations().book()
    changes = [p.node_change for plan in book.plans(incident_id) for p in plan.proposals if p.node_change]
    if not changes:
        raise click.ClickException(f"{incident_id}: no node change was proposed")
    for change in changes[-1:]:
        run = apply_and_deploy(lw.coalesce_url, LOCAL_COALESCE_TOKEN, change)
        click.echo(f"{change.node_name}: applied in the Coalesce workspace and deployed to environment "
                   f"{change.environment_id} (deploy run {run})")  # fmt: skip


@world.command("down")
@click.option("--root", type=click.Path(path_type=Path), default=DEFAULT_ROOT, show_default=True)
def world_down(root: Path) -> None:
    """Stop the world under ROOT however it was started: the Dagster UI of a `world up` (in a terminal or in
    the background; that `world up` then ends) and every server, or the servers `world up --no-ui` left."""
    stopped = LocalWorld.stop_running(root.resolve())
    click.echo(f"stopped: {', '.join(stopped)}" if stopped is not None else f"no world running under {root}")


@world.command("status")
@click.option("--root", type=click.Path(path_type=Path), default=DEFAULT_ROOT, show_default=True)
def world_status(root: Path) -> None:
    state = LocalWorld.read_state(root.resolve())
    click.echo(json.dumps(state, indent=2) if state else f"no world running under {root}")


@click.group(cls=WorldCommands)
def slack() -> None:
    """The local Slack stand-in."""


@slack.command("log")
@click.option("--root", type=click.Path(path_type=Path), default=DEFAULT_ROOT, show_default=True)
@click.option("--channel", default=None, help="Only this channel, e.g. '#buyers'.")
@click.option(
    "--tz", "tz_name", default=None, help="Show times in this IANA time zone (default: this machine's)."
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the stored messages as JSON, each with its rendering."
)
def slack_log(root: Path, channel: str | None, tz_name: str | None, as_json: bool) -> None:
    """Print what a person sees of every message the Slack stand-in received: the blocks rendered as text,
    times in your time zone, each thread under its first message."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    from dw_dagster.notifications.text import counted
    from dw_local.slack_render import render_log, render_message
    from dw_local.slack_server import SlackSink

    try:
        tz = ZoneInfo(tz_name) if tz_name else None
    except (ZoneInfoNotFoundError, ValueError):
        raise click.BadParameter(
            f"expected an IANA time zone such as 'America/Chicago', got {tz_name!r}", param_hint="--tz"
        ) from None
    # Read the store itself, so the log is there whether or not the world is running.
    sink = SlackSink(root.resolve() / "slack")
    messages = sink.messages(channel)
    if as_json:
        click.echo(json.dumps([{**m, "rendered": render_message(m, tz)} for m in messages], indent=2))
        return
    if messages:
        click.echo(render_log(messages, tz))
    click.echo(counted(len(messages), "message"))


@slack.command("click")
@click.argument("message_ts")
@click.option("--as", "user", required=True, help="The Slack user id who clicks, e.g. U0INVAN01.")
@click.option("--button", default="Approve", show_default=True, help="The button's text or action id.")
@click.option("--root", type=click.Path(path_type=Path), default=DEFAULT_ROOT, show_default=True)
def slack_click(message_ts: str, user: str, button: str, root: Path) -> None:
    """Play USER's click on a button of the message MESSAGE_TS (the ts `slack log` prints beside it): the
    stand-in sends the request Slack would, signed with the app's signing secret, to dw-dagster's endpoint,
    and counts it failed, as Slack does, unless the endpoint answers 200 within 3 seconds."""
    from dw_local.interactivity import ClickRefused
    from dw_local.interactivity import click as play_click

    try:
        out = play_click(LocalWorld.attach(root.resolve()), message_ts, user, button)
    except ClickRefused as e:
        raise CommandError(str(e), exit_code=2) from None
    sent, pressed = out["interaction"], out["button"]
    answered = "no answer" if sent["status"] is None else f"answered {sent['status']}"
    click.echo(f'{user} clicked "{pressed["text"]}" ({pressed["action_id"]}) on {message_ts}: the endpoint '
               f"{answered} in {sent['elapsed_ms']:.0f} ms" + (f": {sent['answer']}" if sent["answer"] else ""))  # fmt: skip
    if pressed.get("url"):
        click.echo(f"the link opens in the browser: {pressed['url']}")
    for reply in out["replies"]:
        click.echo(reply.get("text", ""))
    if not sent["acknowledged"]:
        raise CommandError(f"the click failed as Slack shows it: {sent['user_sees']}")
    if not pressed.get("url") and not out["replies"]:
        raise CommandError("the endpoint acknowledged the click but sent no reply through its response_url")


class CommandError(click.ClickException):
    """A command's failure in one line (``Error: ...``), no traceback; exit code 2 for a mistake in what was
    asked, 1 for what went wrong."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


@click.group(cls=WorldCommands)
def demo() -> None:
    """The reference night, played end to end on the local world."""


@demo.command("replay")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the timeline as JSON events {time, system, what, numbers}."
)
@click.option("--root", type=click.Path(path_type=Path), default=Path(".dw/replay"), show_default=True,
              help="Where the fresh world is made (deleted first).")  # fmt: skip
@click.option("--cache", type=click.Path(path_type=Path), default=DEFAULT_CACHE, show_default=True)
def demo_replay(as_json: bool, root: Path, cache: Path) -> None:
    """Play the reference night headless: detection, diagnosis, Slack, proposals, the owners' approvals
    (through `dw-dagster approve`), the node deploy, the scoped rerun, verification and the receipt."""
    import warnings

    from dw_local.demo import replay
    from dw_local.seeding import Template

    # Dagster's preview and deprecation notices say nothing about the night; keep the output to the story.
    warnings.simplefilter("ignore")
    echo = None if as_json else click.echo
    template = Template(cache.resolve(), progress=echo)
    if echo is not None and not template.built():
        echo(f"preparing the seeded world (built once, about 7 minutes on 2 cores; cached under {cache}) ...")
    events = replay(root.resolve(), template.path(), echo=echo)
    if as_json:
        click.echo(json.dumps(events, indent=2, default=str))
