"""Where the local Snowflake keeps its stages' files: with the world's data, not in a folder of its own.

fakesnow (pinned 0.12.1) makes the folder that holds every internal stage's files when it is imported
(``fakesnow/transforms/stage.py``: ``LOCAL_BUCKET_PATH = tempfile.mkdtemp(prefix="fakesnow_bucket_")``) and
never removes it. So every process that imported it (each test worker, fork server, template build and
command) left one in the temporary folder (962 of them after a day's runs), and every Snowflake server
forked from one fork server shared its parent's: two worlds with the same database name, served at the same
time, wrote their loads' files to the same stage folder. Snowflake keeps a stage's files with the account
that owns the stage; the local Snowflake keeps them with its world's data (``snowflake_server.serve``).
"""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path

# The prefix fakesnow's import gives its folder (fakesnow/transforms/stage.py).
IMPORT_PREFIX = "fakesnow_bucket_"


def keep_stages_in(folder: Path) -> None:
    """Points fakesnow's internal stages at ``folder`` (made on first use: fakesnow makes a stage's folder
    when a file is put) and removes the empty folder its import made. A folder that is not empty, or was not
    made by an import, belongs to another process's stages: it is left as it is."""
    from fakesnow.transforms import stage

    made = Path(stage.LOCAL_BUCKET_PATH)
    stage.LOCAL_BUCKET_PATH = str(folder)
    if made != folder and made.name.startswith(IMPORT_PREFIX):
        with suppress(OSError):  # not empty, or already gone
            os.rmdir(made)
