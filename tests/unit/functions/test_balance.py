"""balance.plan: the manifest lines of a run, its frozen split, small labels and boosted rare classes."""

from __future__ import annotations

from collections import Counter

import pytest

from retrain_contract import balance, container


def _entries(**per_label: int) -> list[tuple[str, str]]:
    return [(f"{label}/{i:05d}.jpg", label) for label, n in per_label.items() for i in range(n)]


def _train_lines(plan: balance.Plan) -> Counter[str]:
    return Counter(label for _, label, split in plan.lines if split == container.SPLIT_TRAIN)


def test_without_balancing_every_image_is_one_line_on_the_side_its_key_hashes_into():
    entries = _entries(cat=500, lynx=20)
    plan = balance.plan(entries, balance.Policy())
    assert sorted((p, label) for p, label, _ in plan.lines) == sorted(entries)
    for path, _, split in plan.lines:
        assert (split == container.SPLIT_VALIDATION) == container.in_validation(path, 0.2)
    assert plan.counts["cat"].train_lines == plan.counts["cat"].train


def test_oversampling_repeats_a_rare_class_up_to_the_ratio_and_leaves_validation_alone():
    # GIVEN 500 cats and 50 lynxes (10:1), oversampled to at least half the largest class
    entries = _entries(cat=500, lynx=50)
    plain = balance.plan(entries, balance.Policy())
    plan = balance.plan(entries, balance.Policy(mode="oversample", ratio=0.5))
    cat, lynx = plan.counts["cat"], plan.counts["lynx"]
    # THEN the lynx training lines reach half the cat's; every lynx image is repeated evenly (±1)
    assert lynx.train_lines == -(-cat.train // 2) and cat.train_lines == cat.train
    repeats = Counter(
        p for p, label, split in plan.lines if label == "lynx" and split == container.SPLIT_TRAIN
    )
    assert len(repeats) == lynx.train and max(repeats.values()) - min(repeats.values()) <= 1
    # AND the validation lines are the unboosted ones, each once
    validation = lambda p: [(x, label) for x, label, s in p.lines if s == container.SPLIT_VALIDATION]  # noqa: E731
    assert validation(plan) == validation(plain)
    assert len(set(validation(plan))) == len(validation(plan))


def test_a_cap_keeps_at_most_that_many_training_images_of_a_class_chosen_stably():
    entries = _entries(cat=500, lynx=20)
    plan = balance.plan(entries, balance.Policy(mode="cap", cap=100))
    assert _train_lines(plan) == Counter(cat=100, lynx=plan.counts["lynx"].train)
    again = balance.plan(list(reversed(entries)), balance.Policy(mode="cap", cap=100))
    assert sorted(plan.lines) == sorted(again.lines)
    # a new image does not reshuffle which of the old ones are kept (the choice is by each key's hash)
    more = balance.plan([*entries, ("cat/new.jpg", "cat")], balance.Policy(mode="cap", cap=100))
    kept, kept_more = (
        {p for p, label, s in x.lines if label == "cat" and s == "train"} for x in (plan, more)
    )
    assert len(kept - kept_more) <= 1


@pytest.mark.parametrize(("small_labels", "excluded"), [("exclude", True), ("allow", False)])
def test_a_label_below_the_minimum_is_excluded_or_allowed_and_said_so(small_labels, excluded):
    plan = balance.plan(
        _entries(cat=50, dog=40, lynx=3), balance.Policy(min_images=5, small_labels=small_labels)
    )
    assert ("lynx" in plan.excluded) is excluded and ("lynx" in plan.counts) is not excluded
    if excluded:
        assert plan.excluded["lynx"] == "3 image(s), below MinImagesPerLabel 5; upload more images of it"
        assert all(label != "lynx" for _, label, _ in plan.lines)
        assert plan.record()["excluded_labels"] == {"lynx": plan.excluded["lynx"]}


def test_a_label_whose_only_images_hash_into_validation_is_excluded_even_when_allowed():
    only_validation = next(
        f"lynx/{i}.jpg" for i in range(1000) if container.in_validation(f"lynx/{i}.jpg", 0.2)
    )
    plan = balance.plan(
        [*_entries(cat=10, dog=10), (only_validation, "lynx")], balance.Policy(small_labels="allow")
    )
    assert "none is left to train on" in plan.excluded["lynx"]


def test_the_policy_the_run_record_shows():
    assert balance.Policy(mode="oversample", ratio=0.25).record() == {
        "mode": "oversample",
        "ratio": 0.25,
        "min_images_per_label": 1,
        "small_labels": "exclude",
    }
    assert balance.Policy(mode="cap", cap=7).record()["cap"] == 7
