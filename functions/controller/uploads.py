"""Which uploaded objects are training images: the layout data/<dataset>/<label>/<image>."""

from __future__ import annotations

from dataclasses import dataclass

from controller import names

REJECTED_DATASET = "-"  # ledger partition for keys whose data set segment is unusable


@dataclass(frozen=True)
class Verdict:
    dataset: str
    label: str
    filename: str
    reason: str | None  # None: accepted
    problem: str = names.PROBLEM_LAYOUT  # what kind of rejection (names.PROBLEM_*), when rejected

    @property
    def accepted(self) -> bool:
        return self.reason is None


def _name_problem(kind: str, value: str, limit: int) -> str | None:
    if not value:
        return f"the {kind} segment is empty"
    if len(value) > limit:
        return f"the {kind} {value[:20]!r}... is longer than {limit} characters"
    if not names.DATASET_RE.fullmatch(value):
        return (
            f"the {kind} {value!r} "
            "may hold only letters, digits, '-' and '_', starting with a letter or digit"
        )
    return None


def judge(key: str, size: int) -> Verdict:
    """Accept or reject one object; a rejection says what is wrong and what the layout must be."""
    layout = f"expected {names.DATA_PREFIX}<dataset>/<label>/<image>{'|'.join(names.IMAGE_EXTENSIONS)}"
    parts = key.split("/")
    dataset = parts[1] if len(parts) > 1 and parts[1] else REJECTED_DATASET
    if len(dataset) > names.MAX_DATASET_LENGTH or not names.DATASET_RE.fullmatch(dataset):
        dataset_problem = _name_problem("data set", dataset, names.MAX_DATASET_LENGTH)
        dataset = REJECTED_DATASET
    else:
        dataset_problem = None
    label = parts[2] if len(parts) > 2 else ""
    filename = parts[-1] if len(parts) > 3 else ""

    def reject(reason: str) -> Verdict:
        return Verdict(dataset, label, filename, reason)

    if not key.startswith(names.DATA_PREFIX):
        return reject(f"the key is outside {names.DATA_PREFIX}; {layout}")
    if len(parts) != 4:
        return reject(f"the key has {len(parts) - 1} '/'-separated levels under data/; {layout}")
    if dataset_problem:
        return reject(dataset_problem)
    label_problem = _name_problem("label", label, names.MAX_LABEL_LENGTH)
    if label_problem:
        return reject(label_problem)
    if not filename:
        return reject("the key ends with '/' (a folder marker, not an image)")
    if len(filename) > names.MAX_FILENAME_LENGTH:
        return reject(f"the file name is longer than {names.MAX_FILENAME_LENGTH} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in filename):
        return reject("the file name holds control characters")
    if filename.startswith("."):
        return reject("the file name starts with '.' (a hidden file)")
    if not filename.lower().endswith(names.IMAGE_EXTENSIONS):
        return reject(f"the extension is not one of {', '.join(names.IMAGE_EXTENSIONS)}")
    if size <= 0:
        return reject("the object is empty (0 bytes)")
    if size > names.MAX_IMAGE_BYTES:
        return reject(f"the object is {size} bytes, above the {names.MAX_IMAGE_BYTES}-byte limit")
    return Verdict(dataset, label, filename, None)
