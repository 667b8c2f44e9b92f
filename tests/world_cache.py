"""Where the seeded local world's template is cached. A module of its own, not conftest: each test folder
with a conftest.py would otherwise shadow `from conftest import ...` for the others."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Seeding runs the nightly job 60 times; the template is reused across runs while its inputs are unchanged.
WORLD_CACHE = Path(os.environ.get("DW_WORLD_CACHE", REPO / ".dw" / "cache"))
