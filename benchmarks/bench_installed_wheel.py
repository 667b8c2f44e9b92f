"""What ships, measured: the product's wheel size, the size of a fresh venv with it installed (its postgres and
mcp extras included), and the gRPC code server's start (process start to a healthy answer) from that venv
beside the same from the checkout's editable install, with their ratio.

The wheel is built from the checkout (``pip wheel --no-deps``) and installed into a fresh venv outside the
repository, as the image's steps do (``deploy/image-steps.sh``); the Coalesce state is refreshed into each
instance from a Coalesce simulator serving the distributor's project on a free port. Run:

    .venv/bin/python benchmarks/bench_installed_wheel.py [--repeat 5] [--venv DIR]

``--venv`` reuses a venv the wheel is already installed in (the install takes a minute and more).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dw_local.world import LocalWorld

REPO = Path(__file__).resolve().parents[1]
DEV_BIN = Path(sys.executable).parent


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _start(bin_dir: Path, env: dict[str, str], cwd: Path) -> float:
    """Seconds from starting ``dagster api grpc -m dw_dagster.definitions`` to its first healthy answer."""
    from dw_local.world import free_port

    port = free_port()
    began = time.perf_counter()
    server = subprocess.Popen(
        [str(bin_dir / "dagster"), "api", "grpc", "-m", "dw_dagster.definitions", "-h", "127.0.0.1", "-p", str(port)],
        env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = began + 300
        while time.perf_counter() < deadline:
            ok = subprocess.run(
                [str(DEV_BIN / "dagster"), "api", "grpc-health-check", "-p", str(port)],
                capture_output=True,
                env=env,
            )
            if ok.returncode == 0:
                return time.perf_counter() - began
            if server.poll() is not None:
                raise SystemExit(f"the code server from {bin_dir} exited with {server.returncode}")
            time.sleep(0.1)
        raise SystemExit(f"the code server from {bin_dir} did not answer within 300 s")
    finally:
        server.terminate()
        server.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--venv", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(REPO), "-w", str(root / "dist")],
            check=True,
        )
        (wheel,) = (root / "dist").glob("dw_dagster-*.whl")
        venv = args.venv
        if venv is None:
            venv = root / "venv"
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            began = time.perf_counter()
            subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"{wheel}[postgres,mcp]"], check=True)
            print(f"install into a fresh venv: {time.perf_counter() - began:.0f} s")
        print(f"wheel: {_mb(wheel.stat().st_size)}; installed venv: {_mb(_size(venv))}")
        with LocalWorld(root / "world", services=("coalesce", "snowflake")) as lw:
            times = {}
            for name, bin_dir in (("installed wheel", venv / "bin"), ("checkout (editable)", DEV_BIN)):
                home = root / f"home-{name.split()[0]}"
                home.mkdir()
                env = {**os.environ, **lw.env(), "DAGSTER_HOME": str(home)}
                env.pop("VIRTUAL_ENV", None)
                subprocess.run([str(bin_dir / "dw-dagster"), "coalesce", "refresh"], env=env, cwd=root, check=True,
                               capture_output=True)  # fmt: skip
                times[name] = [_start(bin_dir, env, root) for _ in range(args.repeat)]
            for name, t in times.items():
                print(f"code server start, {name}: best {min(t):.2f} s, median {statistics.median(t):.2f} s")
            wheel_t, checkout_t = (statistics.median(t) for t in times.values())
            print(f"ratio installed / checkout (median): {wheel_t / checkout_t:.2f}")


if __name__ == "__main__":
    main()
