from __future__ import annotations

import numpy as np
import pytest
import torch

from retrain_training import evaluate

LABELS = ["cat", "dog", "eel"]


def test_metrics_from_known_predictions() -> None:
    # GIVEN four images (true: cat, cat, dog, eel) and logits ranking the classes
    logits = torch.tensor(
        [
            [3.0, 2.0, 1.0],  # cat, right
            [1.0, 3.0, 2.0],  # dog, wrong; cat third
            [1.0, 3.0, 2.0],  # dog, right
            [3.0, 1.0, 2.0],  # cat, wrong; eel second
        ]
    )
    targets = np.array([0, 0, 1, 2])
    # WHEN scored
    result = evaluate.metrics(logits, targets, LABELS, LABELS)
    # THEN top-1, top-3, the confusion matrix and per-class figures follow
    assert result["top1"] == 0.5
    assert result["top3"] == 1.0
    assert result["confusion_matrix"] == [[1, 1, 0], [0, 1, 0], [1, 0, 0]]
    assert result["per_class"]["cat"] == {"precision": 0.5, "recall": 0.5, "support": 2}
    assert result["per_class"]["dog"] == {"precision": 0.5, "recall": 1.0, "support": 1}
    assert result["per_class"]["eel"] == {"precision": 0.0, "recall": 0.0, "support": 1}
    assert result["samples"] == 4


def test_a_baseline_is_scored_by_label_name_in_the_candidates_label_space() -> None:
    # GIVEN a baseline trained before "eel" existed, with its outputs ordered [dog, cat]
    logits = torch.tensor([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    targets = np.array([0, 1, 2])  # cat, dog, eel in the candidate's labels
    # WHEN scored against the candidate's labels
    result = evaluate.metrics(logits, targets, LABELS, ["dog", "cat"])
    # THEN its outputs map by name and the eel image can only be wrong
    assert result["top1"] == pytest.approx(2 / 3)
    assert result["confusion_matrix"] == [[1, 0, 0], [0, 1, 0], [0, 1, 0]]
    assert result["per_class"]["eel"]["recall"] == 0.0


def test_labels_a_model_lacks_join_the_scoring_labels_after_its_own() -> None:
    # GIVEN a champion trained on [dog, cat] and data that has since gained eel and ant
    # WHEN the scoring labels are chosen
    labels, unknown = evaluate.scoring_labels(["dog", "cat"], {"cat", "eel", "ant", "dog"})
    # THEN its own come first, in its order, then the ones it lacks, sorted
    assert labels == ["dog", "cat", "ant", "eel"]
    assert unknown == ["ant", "eel"]
    assert evaluate.scoring_labels(["dog", "cat"], {"cat"}) == (["dog", "cat"], [])


def test_a_catalogue_of_labels_gets_its_confusions_as_pairs_not_a_square_matrix():
    # GIVEN 3,000 labels, two validation images each, and a model that confuses label 1 with label 2
    import numpy as np
    import torch

    from retrain_contract import container
    from retrain_training.evaluate import metrics

    labels = [f"category-{i:05d}" for i in range(3_000)]
    targets = np.repeat(np.arange(len(labels)), 2)
    predicted = targets.copy()
    predicted[2:4] = 2  # both images of label 1 predicted as label 2
    logits = torch.nn.functional.one_hot(torch.from_numpy(predicted), len(labels)).float()
    # WHEN scored
    result = metrics(logits, targets, labels, labels)
    # THEN evaluation.json's size follows the labels, not their square: no 3,000 x 3,000 matrix
    assert len(labels) > container.DENSE_CONFUSION_MAX_LABELS and "confusion_matrix" not in result
    assert result["confusions"] == [[labels[1], labels[2], 2]]
    # AND the per-class figures are those of the images
    assert result["per_class"][labels[1]] == {"precision": 0.0, "recall": 0.0, "support": 2}
    assert result["per_class"][labels[2]] == {"precision": 0.5, "recall": 1.0, "support": 2}
    assert result["top1"] == 1 - 2 / len(targets)
