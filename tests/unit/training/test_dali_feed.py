"""DALI's parallel external source (dali-feed-processes N) keeps its N worker processes busy at once."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("nvidia.dali")

from retrain_training import dali_loader
from tests.unit.training.test_dali_loader import options, write_images

FEED_SECONDS = 0.4  # what one batch's feed takes in the test: long beside DALI's own work


# The loader's feed, each batch taking FEED_SECONDS more, its start and end written by the worker process
# that fed it. DALI's workers are spawned and import the feed's class by module name: it lives in a module
# of its own on the workers' sys.path (this file's package, tests/, is shadowed in them by a site-packages
# package of that name).
TIMED_FEED = """
import json, os, time
from pathlib import Path
from retrain_training.dali_loader import ParallelFeed

class TimedFeed(ParallelFeed):
    record = RECORD
    def __call__(self, info):
        began = time.time()
        time.sleep(FEED_SECONDS)
        fed = super().__call__(info)
        line = {"pid": os.getpid(), "began": began, "ended": time.time()}
        name = f"{os.getpid()}-{info.epoch_idx}-{info.iteration}.json"
        Path(self.record, name).write_text(json.dumps(line))
        return fed
"""


def timed_feed(folder: Path, record: Path, monkeypatch: pytest.MonkeyPatch) -> type:
    module = f"timed_feed_{os.getpid()}"
    source = TIMED_FEED.replace("RECORD", repr(str(record))).replace("FEED_SECONDS", repr(FEED_SECONDS))
    (folder / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(folder))
    return importlib.import_module(module).TimedFeed  # type: ignore[no-any-return]


def overlapping(feeds: list[dict[str, Any]]) -> int:
    """The most feeds that ran at the same moment."""
    moments = sorted([(f["began"], 1) for f in feeds] + [(f["ended"], -1) for f in feeds])
    running = most = 0
    for _, change in moments:
        running += change
        most = max(most, running)
    return most


@pytest.mark.parametrize("processes", [2, 3])
def test_n_feed_processes_feed_n_batches_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, processes: int
) -> None:
    # GIVEN a loader fed by N worker processes, each batch's feed slow (FEED_SECONDS)
    samples = write_images(tmp_path / "images", 4 * 12)
    (tmp_path / "feeds").mkdir()
    monkeypatch.setattr(dali_loader, "ParallelFeed", timed_feed(tmp_path, tmp_path / "feeds", monkeypatch))
    loader = dali_loader.DaliLoader(samples, **options(feed_processes=processes))
    # WHEN an epoch of 12 batches runs
    batches = list(loader.epoch(0))
    assert len(batches) == len(samples) // 4
    # THEN N of the workers fed batches at the same time, as N processes can (with one batch scheduled
    # ahead, the external source's default queue depth in parallel mode, one process worked at a time)
    feeds = [json.loads(p.read_text()) for p in (tmp_path / "feeds").iterdir()]
    assert len({f["pid"] for f in feeds}) == processes
    assert overlapping(feeds) == processes, sorted((f["began"], f["ended"], f["pid"]) for f in feeds)
