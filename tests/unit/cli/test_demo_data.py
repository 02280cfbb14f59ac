from __future__ import annotations

import pytest
from PIL import Image

from retrain.demo.data import LABELS, batches, write_digits, write_mistakes


def test_digits_are_written_as_jpegs_in_label_folders(tmp_path):
    # WHEN the first 30 digits are written at 32 pixels
    dataset = write_digits(tmp_path, size=32, limit=30)
    # THEN each is a decodable 32x32 RGB JPEG in its label's folder
    assert len(dataset.files) == 30
    for path in dataset.files:
        assert path.parent.parent == tmp_path
        assert path.parent.name in LABELS
        with Image.open(path) as image:
            assert (image.format, image.size, image.mode) == ("JPEG", (32, 32), "RGB")
    assert sum(dataset.per_label.values()) == 30


def test_every_digit_class_is_written(tmp_path):
    # WHEN the first 20 digits are written (load_digits cycles through the classes)
    dataset = write_digits(tmp_path, size=8, limit=20)
    # THEN all ten labels have their images
    assert sorted(dataset.per_label) == sorted(LABELS)
    assert sorted(p.name for p in (tmp_path / "zero").iterdir()) == ["digit-0000.jpg", "digit-0010.jpg"]


def test_a_later_slice_writes_other_digits_under_other_names(tmp_path):
    # GIVEN the first 20 digits written WHEN the next 15 are written beside them
    first = write_digits(tmp_path / "a", size=8, limit=20)
    later = write_digits(tmp_path / "b", size=8, limit=15, start=20)
    # THEN the names do not overlap (a second upload is new objects, not overwrites)
    assert len(later.files) == 15
    assert not {p.name for p in first.files} & {p.name for p in later.files}
    assert min(p.name for p in later.files) == "digit-0020.jpg"


def test_a_start_outside_the_digits_is_refused(tmp_path):
    with pytest.raises(ValueError, match="start must be within the 1797 digits"):
        write_digits(tmp_path, start=1797)


def test_batches_split_evenly_and_keep_every_file():
    # GIVEN ten files
    files = [f"f{i}" for i in range(10)]
    # WHEN split into three upload batches
    split = batches(files, 3)
    # THEN sizes differ by at most one and nothing is lost or repeated
    assert sorted(len(b) for b in split) == [3, 3, 4]
    assert sorted(f for b in split for f in b) == sorted(files)


def test_the_demos_mistakes_are_a_non_image_and_an_empty_image(tmp_path):
    # WHEN the demo's user mistakes are written
    note, empty = write_mistakes(tmp_path)
    # THEN they sit in label folders where a user would have dropped them
    assert note.suffix == ".txt" and note.stat().st_size > 0
    assert empty.suffix == ".jpg" and empty.stat().st_size == 0
    assert {note.parent.name, empty.parent.name} <= set(LABELS)
