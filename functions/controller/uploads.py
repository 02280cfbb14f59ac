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


LAYOUT = f"expected {names.DATA_PREFIX}<dataset>/<label>/<image>{'|'.join(names.IMAGE_EXTENSIONS)}"


def _dataset(parts: list[str]) -> tuple[str, str | None]:
    """The data set a key names (REJECTED_DATASET when unusable), and what is wrong with it."""
    dataset = parts[1] if len(parts) > 1 and parts[1] else REJECTED_DATASET
    if len(dataset) > names.MAX_DATASET_LENGTH or not names.DATASET_RE.fullmatch(dataset):
        return REJECTED_DATASET, _name_problem("data set", dataset, names.MAX_DATASET_LENGTH)
    return dataset, None


def _layout_problem(key: str, parts: list[str], dataset_problem: str | None, label: str) -> str | None:
    """What is wrong with where the object is: outside data/, at another depth, or a bad name."""
    if not key.startswith(names.DATA_PREFIX):
        return f"the key is outside {names.DATA_PREFIX}; {LAYOUT}"
    if len(parts) != 4:
        return f"the key has {len(parts) - 1} '/'-separated levels under data/; {LAYOUT}"
    return dataset_problem or _name_problem("label", label, names.MAX_LABEL_LENGTH)


def _filename_problem(filename: str) -> str | None:
    if not filename:
        return "the key ends with '/' (a folder marker, not an image)"
    if len(filename) > names.MAX_FILENAME_LENGTH:
        return f"the file name is longer than {names.MAX_FILENAME_LENGTH} characters"
    if any(ord(c) < 32 or ord(c) == 127 for c in filename):
        return "the file name holds control characters"
    if filename.startswith("."):
        return "the file name starts with '.' (a hidden file)"
    if not filename.lower().endswith(names.IMAGE_EXTENSIONS):
        return f"the extension is not one of {', '.join(names.IMAGE_EXTENSIONS)}"
    return None


def _size_problem(size: int) -> str | None:
    if size <= 0:
        return "the object is empty (0 bytes)"
    if size > names.MAX_IMAGE_BYTES:
        return f"the object is {size} bytes, above the {names.MAX_IMAGE_BYTES}-byte limit"
    return None


def judge(key: str, size: int) -> Verdict:
    """Accept or reject one object; a rejection says what is wrong and what the layout must be.

    The first problem found is the reason, checked in order: the key's place and names, the file name,
    the size."""
    parts = key.split("/")
    dataset, dataset_problem = _dataset(parts)
    label = parts[2] if len(parts) > 2 else ""
    filename = parts[-1] if len(parts) > 3 else ""
    reason = (
        _layout_problem(key, parts, dataset_problem, label)
        or _filename_problem(filename)
        or _size_problem(size)
    )
    return Verdict(dataset, label, filename, reason)
