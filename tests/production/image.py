"""The image, without Docker: the steps the Dockerfile runs (``deploy/image-steps.sh``), read from the
Dockerfile in its order, run in a scratch folder with a fresh venv outside the repository standing in for the
image's Python. What they install is what the production-shaped tests then run: the code server, the daemon,
the webserver, the run workers and the operator's commands, all from that venv, never from the checkout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
STEPS = REPO / "deploy" / "image-steps.sh"
# The steps a Dockerfile must run, in this order (the test asserts it runs them all).
EXPECTED = ["wheel", "install", "home", "refresh", "check"]
# Each step's ceiling: an install resolves and installs the product's dependencies.
STEP_TIMEOUT = 900


def dockerfile_steps() -> list[list[str]]:
    """Each ``dw-image-step`` the Dockerfile runs, with its arguments, in order (continuation lines joined)."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    return [
        line.split("dw-image-step", 1)[1].split()
        for line in text.splitlines()
        if line.startswith("RUN ") and "dw-image-step" in line
    ]


def dockerfile_env() -> dict[str, str]:
    """The final stage's ``ENV`` values that hold no build argument (``${...}``), as the image sets them."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    final = text[text.rindex("\nFROM ") :]
    env: dict[str, str] = {}
    for line in final.splitlines():
        if line.startswith("ENV "):
            for name, value in re.findall(r"(\w+)=(\S+)", line[4:]):
                if "${" not in value:
                    env[name] = value
    return env


@dataclass
class Image:
    """The image's steps run under ``root``: its wheel, its venv (the image's Python), its DAGSTER_HOME."""

    root: Path

    def __post_init__(self) -> None:
        self.venv = self.root / "venv"
        self.bin = self.venv / "bin"
        self.wheels = self.root / "wheels"
        self.home = self.root / "dagster_home"
        # The image's paths, here.
        self.paths = {
            "/src": str(REPO),
            "/wheels": str(self.wheels),
            "/opt/dagster/dagster_home": str(self.home),
        }
        self.ran: list[str] = []

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of a process of the image: this machine's, without the checkout's venv, with the
        image's ``ENV`` (its paths mapped here) and ``extra``."""
        base = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
        dev_bin = str(Path(sys.executable).parent)
        path = [p for p in base.get("PATH", "").split(os.pathsep) if p != dev_bin]
        image = {k: self.paths.get(v, v) for k, v in dockerfile_env().items()}
        return {**base, **image, "PATH": os.pathsep.join([str(self.bin), *path]), **(extra or {})}

    def create_venv(self) -> None:
        subprocess.run([sys.executable, "-m", "venv", str(self.venv)], check=True, timeout=300)

    def run(self, step: list[str], extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """One step, its container paths mapped here, from the scratch folder; raises with its output."""
        args = [self.paths.get(a, a) for a in step[1:]]
        done = subprocess.run(
            ["sh", str(STEPS), step[0], *args], cwd=self.root, env=self.env(extra),
            capture_output=True, text=True, timeout=STEP_TIMEOUT,
        )  # fmt: skip
        if done.returncode != 0:
            raise AssertionError(
                f"image step {' '.join(step)} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
            )
        self.ran.append(step[0])
        return done

    def python(self, code: str, extra: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            [str(self.bin / "python"), "-c", code], cwd=self.root, env=self.env(extra), capture_output=True,
            text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.strip()
