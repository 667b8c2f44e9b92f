"""The public scenario suite shipped with dw-dagster, and how a directory of scenarios is found."""

from __future__ import annotations

from pathlib import Path

import yaml

SUITE_DIR = Path(__file__).resolve().parent / "suite"


def scenario_files(directory: Path) -> list[Path]:
    """Every scenario file under ``directory`` (a YAML mapping with ``nights``), in a stable order; world
    files and the project, context and metrics files they name may sit alongside and are skipped."""
    found = []
    for path in sorted(Path(directory).rglob("*.y*ml")):
        try:
            # libyaml's parser: a tenth of the pure-Python one's CPU (worlds are made again and again).
            raw = yaml.load(path.read_text(), Loader=yaml.CSafeLoader)
        except yaml.YAMLError:
            found.append(path)  # a broken scenario is reported when it is loaded, not skipped
            continue
        if isinstance(raw, dict) and "nights" in raw:
            found.append(path)
    return found
