"""The emulator's pure parts: S3 URIs, metric regexes, ranges."""

from __future__ import annotations

import optuna
import pytest
from botocore.exceptions import ClientError

from retrain.embedded.sagemaker.logs import MetricTracker, compile_metric_definitions
from retrain.embedded.sagemaker.s3io import S3Uri
from retrain.embedded.sagemaker.spot import SpotSchedule
from retrain.embedded.sagemaker.tuning import ParameterSpec, parse_ranges
from retrain_contract import container as contract


def test_s3_uri_parses_and_refuses_what_is_not_one() -> None:
    assert S3Uri.parse("s3://bucket/a/b/").join("c", "d.txt") == S3Uri("bucket", "a/b/c/d.txt")
    with pytest.raises(ValueError, match="is not an S3 URI"):
        S3Uri.parse("bucket/key")


def test_contract_metric_regexes_read_the_metric_lines() -> None:
    # GIVEN the contract's MetricDefinitions and two metric lines
    tracker = MetricTracker(compile_metric_definitions(contract.METRIC_DEFINITIONS, "test"))

    # WHEN fed the lines (val-accuracy must not match inside val-top3-accuracy)
    tracker.feed(contract.format_metric(contract.METRIC_VAL_ACCURACY, 0.5, epoch=0, step=4))
    tracker.feed(contract.format_metric(contract.METRIC_VAL_TOP3, 0.9, epoch=0, step=4))
    tracker.feed(contract.format_metric(contract.METRIC_VAL_ACCURACY, 0.75, epoch=1, step=8))

    # THEN the final values are the last of each
    final = {m["MetricName"]: m["Value"] for m in tracker.final_metric_data()}
    assert final == {contract.METRIC_VAL_ACCURACY: 0.75, contract.METRIC_VAL_TOP3: 0.9}


def test_metric_definition_without_a_capture_group_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a capture group"):
        compile_metric_definitions([{"Name": "loss", "Regex": "loss: [0-9.]+"}], "CreateTrainingJob")


def test_reverse_logarithmic_range_samples_inside_the_range_dense_near_one() -> None:
    # GIVEN a ReverseLogarithmic momentum range
    (spec,) = parse_ranges(
        {
            "ContinuousParameterRanges": [
                {
                    "Name": "momentum",
                    "MinValue": "0.5",
                    "MaxValue": "0.999",
                    "ScalingType": "ReverseLogarithmic",
                }
            ]
        },
        {},
    )
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))

    # WHEN 200 values are drawn
    values = [
        float(
            spec.to_hyperparameter(study.ask({spec.param_name: spec.distribution()}).params[spec.param_name])
        )
        for _ in range(200)
    ]

    # THEN all lie in the range and most lie near 1, and a parent's value maps back inside
    assert all(0.5 <= v <= 0.999 for v in values)
    assert sum(v > 0.9 for v in values) > 100
    assert spec.from_hyperparameter("0.99") == pytest.approx(0.01)
    assert spec.from_hyperparameter("0.1") is None


def test_integer_log_range_yields_integers() -> None:
    spec = ParameterSpec("batch-size", "Integer", 8, 256, "Logarithmic")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    drawn = [
        spec.to_hyperparameter(study.ask({spec.param_name: spec.distribution()}).params[spec.param_name])
        for _ in range(20)
    ]
    assert all(d.isdigit() and 8 <= int(d) <= 256 for d in drawn)


def test_ranges_with_min_above_max_are_refused() -> None:
    with pytest.raises(ClientError, match="greater than MaxValue"):
        parse_ranges({"IntegerParameterRanges": [{"Name": "epochs", "MinValue": "5", "MaxValue": "2"}]}, {})


def test_spot_schedule_refuses_an_interruption_without_a_trigger() -> None:
    with pytest.raises(ValueError, match="after_checkpoints or after_seconds"):
        SpotSchedule(interruptions=1, after_checkpoints=None)
