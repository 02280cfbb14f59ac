"""Suspected label errors by confident learning (cleanlab), and the accuracy interval beside them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from retrain_training import data, evaluate, label_check

LABELS = ["cat", "dog", "eel"]


def _confident(true: np.ndarray, rng: np.random.Generator, strength: float = 0.85) -> np.ndarray:
    """Probabilities of a good model: most of the mass on the true label, the rest spread at random."""
    noise = rng.dirichlet(np.ones(len(LABELS)), len(true)) * (1 - strength)
    noise[np.arange(len(true)), true] += strength
    return noise


def test_planted_swaps_are_found_and_clean_labels_are_left() -> None:
    # GIVEN 20 seeds of 90 images a model labels confidently, 6 of each given a swapped label
    planted = found_planted = flagged = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        true = np.repeat(np.arange(3), 30)
        probabilities = _confident(true, rng)
        given = true.copy()
        swapped = rng.choice(len(true), 6, replace=False)
        given[swapped] = (true[swapped] + rng.integers(1, 3, 6)) % 3
        keys = [f"{LABELS[g]}/{i:03d}.jpg" for i, g in enumerate(given)]
        # WHEN checked
        found = label_check.find_suspects(given, probabilities, LABELS, keys)
        # THEN every suspect was planted, with the label the model gives and its confidence, ranked by the
        # model's probability of the given label, lowest first
        for suspect in found:
            i = keys.index(suspect.key)
            assert i in swapped
            assert (suspect.given, suspect.suggested) == (LABELS[given[i]], LABELS[true[i]])
            assert suspect.confidence == pytest.approx(probabilities[i].max())
        assert [s.given_probability for s in found] == sorted(s.given_probability for s in found)
        planted, found_planted, flagged = planted + 6, found_planted + len(found), flagged + len(found)
        # AND the same images with their true labels give no suspect
        assert label_check.find_suspects(true, probabilities, LABELS, keys) == []
    # AND most planted swaps are found (confident learning estimates how many to prune: it may stop short)
    assert found_planted / planted >= 0.85


def test_per_label_rates_count_suspects_by_the_label_they_were_given() -> None:
    given = np.array([0, 0, 0, 0, 1, 1])
    suspects = [label_check.Suspect("cat/1.jpg", "cat", "dog", 0.9, 0.05)]
    assert label_check.per_label(suspects, given, LABELS) == {
        "cat": {"images": 4, "suspects": 1, "rate": 0.25},
        "dog": {"images": 2, "suspects": 0, "rate": 0.0},
    }


def test_the_wilson_interval_of_8_of_10() -> None:
    # by hand: p = 0.8, z = 1.96: centre (0.8 + 0.19208) / 1.38416 = 0.71676, half-width
    # 1.96 * sqrt(0.016 + 0.009604) / 1.38416 = 0.22657
    low, high = label_check.wilson_interval(8, 10)
    assert (low, high) == (pytest.approx(0.49019, abs=1e-4), pytest.approx(0.94333, abs=1e-4))
    assert label_check.wilson_interval(0, 5)[0] == 0.0 and label_check.wilson_interval(5, 5)[1] == 1.0
    with pytest.raises(ValueError, match="at least one image"):
        label_check.wilson_interval(0, 0)


def test_probabilities_of_another_shape_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"probabilities \(2, 2\) must be \(images, labels\) = \(2, 3\)"):
        label_check.find_suspects(np.array([0, 1]), np.ones((2, 2)), LABELS, ["a", "b"])


def test_evaluations_suspects_leave_out_images_of_labels_the_model_lacks(tmp_path) -> None:
    # GIVEN a model of [cat, dog, eel] scored over its labels and one it lacks ("fox", index 3), its logits
    # confident, and three cats and three eels given the label dog
    rng = np.random.default_rng(0)
    true = np.repeat(np.arange(3), 20)
    given = true.copy()
    swapped = [1, 5, 9, 41, 45, 49]
    given[swapped] = 1
    samples = [
        data.Sample(tmp_path / f"{i}.jpg", int(g), f"{LABELS[g]}/{i}.jpg") for i, g in enumerate(given)
    ]
    samples.append(data.Sample(tmp_path / "fox.jpg", 3, "fox/0.jpg"))
    logits = torch.log(torch.from_numpy(_confident(np.append(true, 0), rng))).float()
    # WHEN its suspects are listed
    document = evaluate.suspects(logits, samples, LABELS, known=3)
    # THEN the fox image is not checked (the model cannot judge a label it lacks); the suspects are swapped
    # dogs, each with the label the model gives
    assert document["images_checked"] == 60 and document["suspect_count"] >= 1
    assert {s["key"] for s in document["suspects"]} <= {f"dog/{i}.jpg" for i in swapped}
    assert all(s["suggested"] in ("cat", "eel") for s in document["suspects"])
    assert document["per_label"]["dog"]["images"] == 26
    assert document["method"] == label_check.METHOD.format(label_check.DEFAULT_FILTER)


def test_evaluate_writes_the_suspects_of_a_folder_with_its_accuracy_interval(tmp_path, monkeypatch) -> None:
    # GIVEN a model.tar.gz as train.py writes it (over the labels of 30 real digit images) and the images
    import json

    from retrain.demo import data as demo_data
    from retrain_contract import container as contract
    from tests.unit.training.test_start_weights import champion_archive

    written = demo_data.write_digits(tmp_path / "new", limit=30)
    labels = sorted({path.parent.name for path in written.files})
    champion_archive(tmp_path / "model.tar.gz", "resnet18", labels)
    monkeypatch.setenv(contract.BASE_DIR_ENV, str(tmp_path / "base"))
    # WHEN evaluate.py runs over every image with --suspects, as the processing job would
    out = tmp_path / "out"
    argv = ["--model", str(tmp_path / "model.tar.gz"), "--data", str(tmp_path / "new"), "--split", "all",
            "--suspects", "--output", str(out)]  # fmt: skip
    assert evaluate.run(argv) == 0
    # THEN suspects.json holds the check of every image, and evaluation.json the top-1 with its interval
    document = json.loads((out / contract.SUSPECTS_FILE).read_text())
    assert document["images_checked"] == 30 and document["suspect_count"] == len(document["suspects"])
    assert sum(entry["images"] for entry in document["per_label"].values()) == 30
    result = json.loads((out / contract.EVALUATION_FILE).read_text())
    low, high = result["top1_interval"]
    assert low <= result["top1"] <= high
