"""Upload a folder tree `DIR/<label>/<image>` to `s3://<DataBucket>/data/<dataset>/...`, every file as it is.

The control plane validates each object (and records rejections with a reason); the CLI does not filter,
so what the ledger says about a bad file is what the user sees.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller import names
from retrain.errors import BadDatasetNameError, EmptyFolderError, UsageError

UPLOAD_THREADS = 8


@dataclass(frozen=True)
class LocalFile:
    path: Path
    relative: str  # the path under the folder, "/"-separated: <label>/<image> when laid out right


def check_dataset_name(dataset: str) -> str:
    if not names.DATASET_RE.fullmatch(dataset) or len(dataset) > names.MAX_DATASET_LENGTH:
        raise BadDatasetNameError(
            f"bad dataset name {dataset!r}: use 1-{names.MAX_DATASET_LENGTH} letters, digits, '-' or '_', "
            "starting with a letter or digit (e.g. --dataset flowers-2026)"
        )
    return dataset


def find_files(root: Path) -> list[LocalFile]:
    """Every regular file under root (hidden files and folders skipped), in a stable order."""
    if not root.exists():
        raise UsageError(
            f"folder {str(root)!r} does not exist: pass a folder laid out as DIR/<label>/<image>"
        )
    if not root.is_dir():
        raise UsageError(
            f"{str(root)!r} is a file, not a folder: pass a folder laid out as DIR/<label>/<image>"
        )
    found: list[LocalFile] = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            path = Path(directory) / name
            if path.is_file():
                found.append(LocalFile(path=path, relative=path.relative_to(root).as_posix()))
    if not found:
        raise EmptyFolderError(
            f"folder {str(root)!r} has no files: put images in label folders "
            "(DIR/<label>/<image>.jpg) and retry"
        )
    return found


def likely_images(files: Sequence[LocalFile]) -> list[LocalFile]:
    """Files laid out as <label>/<image> with an image extension and some bytes: what the control plane
    will most likely accept (it alone decides; this only sizes the demo's MinNewImages)."""
    return [
        f
        for f in files
        if f.relative.count("/") == 1
        and f.path.suffix.lower() in names.IMAGE_EXTENSIONS
        and f.path.stat().st_size > 0
    ]


def object_key(dataset: str, file: LocalFile) -> str:
    return f"{names.dataset_prefix(dataset)}{file.relative}"


def upload_files(
    s3: Any,
    bucket: str,
    dataset: str,
    files: Sequence[LocalFile],
    *,
    threads: int = UPLOAD_THREADS,
    on_done: Callable[[str], None] | None = None,
) -> list[str]:
    """Put each file at its key (in parallel); returns the keys in the order of `files`."""
    check_dataset_name(dataset)

    def put(file: LocalFile) -> str:
        key = object_key(dataset, file)
        with file.path.open("rb") as body:
            s3.put_object(Bucket=bucket, Key=key, Body=body)
        if on_done is not None:
            on_done(key)
        return key

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        return list(pool.map(put, files))
