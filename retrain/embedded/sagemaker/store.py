"""Job records as JSON files, so a restarted embedded stack still describes its old jobs."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

KINDS = ("training", "processing", "tuning")


class JobStore:
    """One JSON file per job under `<root>/<kind>/<name>.json`; writes are atomic renames."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        for kind in KINDS:
            (root / kind).mkdir(parents=True, exist_ok=True)

    def _path(self, kind: str, name: str) -> Path:
        if kind not in KINDS:
            raise ValueError(f"unknown job kind {kind!r}; expected one of {KINDS}")
        return self.root / kind / f"{name}.json"

    def save(self, kind: str, record: dict[str, Any], name: str) -> None:
        path = self._path(kind, name)
        tmp = path.with_suffix(f".json.tmp{threading.get_ident()}")
        with self._lock:
            tmp.write_text(json.dumps(record, indent=1, sort_keys=True, default=str), encoding="utf-8")
            os.replace(tmp, path)

    def load_all(self, kind: str) -> dict[str, dict[str, Any]]:
        records: dict[str, dict[str, Any]] = {}
        for path in sorted((self.root / kind).glob("*.json")):
            try:
                records[path.stem] = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                raise RuntimeError(
                    f"job record {path} is unreadable ({exc}); move it aside to start the emulator"
                ) from exc
        return records
