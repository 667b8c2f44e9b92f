"""A world played once and kept (local/dw_local/played.py): the first request plays it, later ones copy it;
each copy is private; a new key (another template, night or code) or a kept world past its age plays it
again; processes side by side play it once. The played "world" here is a folder of files, as a stopped
world is."""

from __future__ import annotations

import os
import pickle
import threading
import time
from pathlib import Path

from dw_local.played import OBSERVED, clone_played, code_hash


class Play:
    """A play that leaves one file in its world and counts how often it ran."""

    def __init__(self, seconds: float = 0.0):
        self.count, self.seconds = 0, seconds

    def __call__(self, root: Path) -> dict:
        self.count += 1
        time.sleep(self.seconds)  # a real play takes seconds: long enough for a second request to arrive
        root.mkdir(parents=True)
        (root / "night.txt").write_text("night 60")
        os.environ["DW_PLAYED_WORLD"] = str(root)  # as a local daemon points the process at its world
        return {"played": self.count}


def test_the_first_request_plays_and_the_next_copies_a_private_world(tmp_path: Path) -> None:
    play = Play()
    first, seen = clone_played(tmp_path / "cache", "distributor-60", tmp_path / "a", play)
    second, again = clone_played(tmp_path / "cache", "distributor-60", tmp_path / "b", play)
    assert play.count == 1 and seen == again == {"played": 1}
    assert "DW_PLAYED_WORLD" not in os.environ, "the play's environment is put back"
    (first / "night.txt").write_text("changed by its test")
    assert (second / "night.txt").read_text() == "night 60", "a copy is private"
    third, _ = clone_played(tmp_path / "cache", "distributor-60", tmp_path / "c", play)
    assert (third / "night.txt").read_text() == "night 60" and play.count == 1, "the kept world is unchanged"


def test_another_name_plays_again_and_both_stay_kept(tmp_path: Path) -> None:
    """Two scenarios starting on different nights of one world alternate without playing each other away."""
    play = Play()
    for name in ("distributor-60", "distributor-61", "distributor-60", "distributor-61"):
        clone_played(tmp_path / "cache", name, tmp_path / f"{name}-{play.count}", play)
    kept = sorted(p.name for p in (tmp_path / "cache").iterdir() if (p / OBSERVED).exists())
    assert play.count == 2 and kept == [f"distributor-60-{code_hash()}", f"distributor-61-{code_hash()}"]


def test_a_world_kept_by_other_code_is_pruned_when_one_is_played(tmp_path: Path) -> None:
    old = tmp_path / "cache" / "distributor-60-0123456789abcdef"
    old.mkdir(parents=True)
    (old / OBSERVED).write_bytes(pickle.dumps({"played": 0}))
    clone_played(tmp_path / "cache", "distributor-60", tmp_path / "a", Play())
    kept = [p.name for p in (tmp_path / "cache").iterdir() if (p / OBSERVED).exists()]
    assert kept == [f"distributor-60-{code_hash()}"]


def test_a_change_to_any_file_of_the_code_changes_its_key(tmp_path: Path) -> None:
    packages = (tmp_path / "dw_dagster", tmp_path / "dw_local")
    for package in packages:
        (package / "checks").mkdir(parents=True)
        (package / "checks" / "judge.py").write_text("THRESHOLD = 3\n")
    before = code_hash.__wrapped__(packages)
    (packages[1] / "checks" / "judge.py").write_text("THRESHOLD = 4\n")
    assert code_hash.__wrapped__(packages) != before
    (packages[1] / "checks" / "judge.py").write_text("THRESHOLD = 3\n")
    (packages[0] / "new.py").write_text("")
    assert code_hash.__wrapped__(packages) != before, "a new file counts"


def test_a_kept_world_past_its_age_is_played_again(tmp_path: Path) -> None:
    play = Play()
    first, _ = clone_played(tmp_path / "cache", "held", tmp_path / "a", play, max_age=3600)
    kept = tmp_path / "cache" / f"held-{code_hash()}" / OBSERVED
    os.utime(kept, (time.time() - 3000, time.time() - 3000))
    clone_played(tmp_path / "cache", "held", tmp_path / "b", play, max_age=3600)
    assert play.count == 1
    os.utime(kept, (time.time() - 3700, time.time() - 3700))
    _, seen = clone_played(tmp_path / "cache", "held", tmp_path / "c", play, max_age=3600)
    assert play.count == 2 and seen == {"played": 2}


def test_requests_side_by_side_play_it_once(tmp_path: Path) -> None:
    play = Play(seconds=0.5)
    seen: list[dict] = []
    threads = [
        threading.Thread(
            target=lambda d=d: seen.append(clone_played(tmp_path / "cache", "held", tmp_path / d, play)[1])
        )
        for d in ("a", "b")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert play.count == 1 and seen == [{"played": 1}] * 2
