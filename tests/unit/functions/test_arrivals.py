"""controller/arrivals.py: the run record's figures on the new uploads, TrainWhen=drift's decision and
SuspectLabels=hold's manifest, on cases computed by hand."""

from __future__ import annotations

from typing import Any

import pytest

from controller import arrivals
from retrain_contract import container
from retrain_training.label_check import wilson_interval


def _figures(hits: int, n: int, reference: float, lacks: list[str] | None = None) -> dict[str, Any]:
    return {
        "top1": hits / n,
        "top1_interval": list(wilson_interval(hits, n)),
        "checked": n,
        "validation_top1": reference,
        "validation_images": 1000,
        "labels_the_model_lacks": lacks or [],
    }


def test_drift_skips_only_on_evidence_that_the_champion_is_not_worse() -> None:
    # 380 of 400 right: the interval's lower end is 0.9240, within 0.02 of 0.93 -> not needed
    assert arrivals.decide(_figures(380, 400, 0.93), "drift")[0] == arrivals.NOT_NEEDED
    # 20 of 20 right: the lower end is 0.8389, too little evidence against 0.93 -> train
    decision, reason = arrivals.decide(_figures(20, 20, 0.93), "drift")
    assert decision == arrivals.TRAIN and reason.startswith("drift: the champion's top-1 on 20 new uploads")
    # 340 of 400 (0.85) against 0.93: worse -> train
    assert arrivals.decide(_figures(340, 400, 0.93), "drift")[0] == arrivals.TRAIN
    # a label it lacks, no validation images, no figures: train
    assert arrivals.decide(_figures(400, 400, 0.9, ["fox"]), "drift")[1].endswith("lacks: fox")
    assert arrivals.decide({**_figures(400, 400, 0.9), "validation_top1": None}, "drift")[0] == arrivals.TRAIN
    assert arrivals.decide(None, "drift")[0] == arrivals.TRAIN
    # TrainWhen=always trains whatever the figures
    assert arrivals.decide(_figures(400, 400, 0.5), "always") == (arrivals.TRAIN, "TrainWhen is always")


def test_the_record_summarizes_the_jobs_figures_within_bounds() -> None:
    per_class = {f"l{i:02d}": {"recall": 1.0 - i / 100, "support": 10, "precision": 1.0} for i in range(30)}
    per_class["empty"] = {"recall": 0.0, "support": 0, "precision": 0.0}
    document = {
        "new": {
            "samples": 300,
            "top1": 0.8,
            "top1_interval": [0.75, 0.84],
            "top3": 0.95,
            "per_class": per_class,
        },
        "validation": {"samples": 200, "top1": 0.9, "top1_interval": [0.85, 0.93]},
        "drift": 0.1,
        "suspects": {"suspect_count": 6, "per_label": {"l05": {"suspects": 4}, "l29": {"suspects": 2}}},
        "held": 0,
        "labels_the_model_lacks": [],
    }
    run: Any = {"new_images": 1000, "arrivals": {"s3_uri": "s3://b/runs/x/evaluation/arrivals/"}}
    figures = arrivals.summarize(document, run)
    assert (figures["checked"], figures["sampled"], figures["suspect_rate"]) == (300, True, 0.02)
    assert figures["drift"] == 0.1 and figures["validation_images"] == 200
    # most suspects first, then the lowest top-1, at most 20 labels, none without images
    assert list(figures["per_label"])[:4] == ["l05", "l29", "l28", "l27"]
    assert len(figures["per_label"]) == arrivals.RECORD_LABELS_MAX and "empty" not in figures["per_label"]
    assert figures["suspects_uri"] == "s3://b/runs/x/evaluation/arrivals/" + container.SUSPECTS_FILE


@pytest.mark.parametrize("held", [0, 3])
def test_hold_swaps_the_manifest_channel_only_when_it_held_some(held: int) -> None:
    def channel(name: str, uri: str) -> dict[str, Any]:
        return {"ChannelName": name, "DataSource": {"S3DataSource": {"S3Uri": uri, "S3DataType": "S3Prefix"}}}

    run: Any = {
        "arrivals": {"held_s3_uri": "s3://b/held/"},
        "input_data_config": [
            channel(container.CHANNEL_TRAIN, "s3://d/"),
            channel(container.CHANNEL_MANIFEST, "s3://b/m/"),
        ],
    }
    swapped = arrivals.with_held_manifest(run, held)
    uris = [c["DataSource"]["S3DataSource"]["S3Uri"] for c in swapped["input_data_config"]]
    assert uris == ["s3://d/", "s3://b/held/" if held else "s3://b/m/"]
    assert run["input_data_config"][1]["DataSource"]["S3DataSource"]["S3Uri"] == "s3://b/m/"  # not changed
