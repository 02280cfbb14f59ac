from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrain_contract import container as contract
from retrain_training import data
from tests.unit.training.conftest import ImageMaker, write_images


def test_folders_give_sorted_labels_and_a_hash_split(tmp_path: Path, make_images: ImageMaker) -> None:
    # GIVEN images in <label>/<file> folders
    make_images(tmp_path, {"dog": 10, "cat": 10})
    # WHEN loaded with a validation fraction
    dataset = data.load_dataset(tmp_path, val_fraction=0.3)
    # THEN labels are sorted, every image is in exactly one split, chosen by its path's hash
    assert dataset.labels == ["cat", "dog"]
    keys = [s.key for s in dataset.train + dataset.validation]
    assert sorted(keys) == sorted(f"{label}/{i:03d}.jpg" for label in ("cat", "dog") for i in range(10))
    assert all(contract.in_validation(s.key, 0.3) for s in dataset.validation)
    assert not any(contract.in_validation(s.key, 0.3) for s in dataset.train)


def test_new_uploads_never_move_older_images_between_splits(tmp_path: Path) -> None:
    # GIVEN a data set split once
    write_images(tmp_path, {"cat": 15, "dog": 15})
    before = data.load_dataset(tmp_path)
    # WHEN more images are uploaded (other names, more labels) and it is split again
    write_images(tmp_path, {"cat": 40, "dog": 30, "eel": 20}, seed=1)
    after = data.load_dataset(tmp_path)
    # THEN every older image stays on its side
    after_validation = {s.key for s in after.validation}
    assert {s.key for s in before.validation} <= after_validation
    assert not {s.key for s in before.train} & after_validation


def test_manifest_repeats_boost_a_class(tmp_path: Path, make_images: ImageMaker) -> None:
    # GIVEN a manifest listing one rare image three times
    make_images(tmp_path, {"cat": 4, "rare": 1})
    lines = [{"path": f"cat/{i:03d}.jpg", "label": "cat"} for i in range(4)] + [
        {"path": "rare/000.jpg", "label": "rare"}
    ] * 3
    manifest = tmp_path / contract.MANIFEST_FILE
    manifest.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    # WHEN loaded without a validation share
    dataset = data.load_dataset(tmp_path, manifest=manifest, val_fraction=0.0)
    # THEN the repeats are separate training samples
    assert [s.key for s in dataset.train].count("rare/000.jpg") == 3
    assert len(dataset.train) == 7


def test_a_bad_manifest_line_names_the_line(tmp_path: Path) -> None:
    manifest = tmp_path / contract.MANIFEST_FILE
    manifest.write_text('{"path": "a/1.jpg", "label": "a"}\n{"file": "b/1.jpg"}\n')
    with pytest.raises(data.DataError, match="line 2"):
        data.load_dataset(tmp_path, manifest=manifest)


def test_bad_files_are_skipped_and_counted(tmp_path: Path, make_images: ImageMaker) -> None:
    # GIVEN a truncated JPEG, a text file named .jpg and an unreadable path among good images
    make_images(tmp_path, {"cat": 4, "dog": 4})
    whole = (tmp_path / "cat" / "000.jpg").read_bytes()
    (tmp_path / "cat" / "truncated.jpg").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "dog" / "notes.jpg").write_text("not an image")
    (tmp_path / "dog" / "dangling.jpg").symlink_to(tmp_path / "nowhere.jpg")
    # WHEN the data set is loaded
    dataset = data.load_dataset(tmp_path, val_fraction=0.0)
    # THEN those three are skipped with their paths, the rest train
    assert sorted(Path(path).name for path, _ in dataset.skipped) == [
        "dangling.jpg",
        "notes.jpg",
        "truncated.jpg",
    ]
    assert len(dataset.train) == 8


@pytest.mark.parametrize(
    ("counts", "message"),
    [
        ({}, "the data set is empty"),
        ({"cat": 5}, "at least two labels"),
    ],
)
def test_unusable_data_sets_fail_with_a_reason(tmp_path: Path, counts: dict[str, int], message: str) -> None:
    write_images(tmp_path, counts)
    with pytest.raises(data.DataError, match=message):
        data.load_dataset(tmp_path)


def test_a_label_without_training_images_fails_with_the_label(
    tmp_path: Path, make_images: ImageMaker
) -> None:
    # GIVEN a label whose only image hashes into validation
    make_images(tmp_path, {"cat": 6})
    lonely = next(f"x{i}.jpg" for i in range(1000) if contract.in_validation(f"dog/x{i}.jpg", 0.2))
    write_images(tmp_path / "tmp", {"dog": 1})
    (tmp_path / "dog").mkdir()
    (tmp_path / "tmp" / "dog" / "000.jpg").rename(tmp_path / "dog" / lonely)
    (tmp_path / "tmp" / "dog").rmdir()
    (tmp_path / "tmp").rmdir()
    # WHEN loaded THEN the failure names the label and what to do
    with pytest.raises(data.DataError, match="dog have no training image"):
        data.load_dataset(tmp_path)


def test_no_train_channel_is_a_clear_failure() -> None:
    with pytest.raises(data.DataError, match="'train' input channel"):
        data.load_dataset(None)


def test_epoch_order_depends_only_on_seed_and_epoch() -> None:
    assert data.epoch_order(50, 1, 0) == data.epoch_order(50, 1, 0)
    assert data.epoch_order(50, 1, 0) != data.epoch_order(50, 1, 1)
    assert data.epoch_order(50, 1, 0) != data.epoch_order(50, 2, 0)
    assert sorted(data.epoch_order(50, 1, 0)) == list(range(50))


def test_ranks_take_disjoint_slices_of_each_global_batch() -> None:
    # GIVEN an epoch order of 21 samples and a global batch of 8
    order = data.epoch_order(21, 0, 0)
    single = data.rank_batches(order, 8, train=True)
    # WHEN two ranks shard it
    ranks = [data.rank_batches(order, 8, train=True, rank=r, world_size=2) for r in range(2)]
    # THEN batch i of rank 0 + rank 1 is the one-process batch i (the partial last batch is dropped)
    assert len(single) == 2
    assert [ranks[0][i] + ranks[1][i] for i in range(2)] == single


def test_evaluation_keeps_the_last_partial_batch() -> None:
    assert data.rank_batches(list(range(10)), 4, train=False) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


@pytest.mark.parametrize(
    ("images", "epochs", "min_steps", "repeats"),
    [(48, 10, 100, 7), (48, 10, 0, 1), (4_000, 10, 100, 1), (256, 5, 100, 3), (0, 5, 100, 1)],
)
def test_a_small_data_sets_epoch_repeats_its_images_to_reach_min_steps(
    images: int, epochs: int, min_steps: int, repeats: int
) -> None:
    # GIVEN a training split, a global batch of 32 and the job's epochs and min-steps
    found = data.repeats_for_steps(images, 32, epochs, min_steps)
    # THEN the fewest passes per epoch that make at least min-steps steps in all (1 when the data does)
    assert found == repeats
    if images and repeats > 1:
        assert epochs * data.num_batches(images * found, 32, train=True) >= min_steps
        assert epochs * data.num_batches(images * (found - 1), 32, train=True) < min_steps
