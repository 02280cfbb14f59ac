"""Hyperparameter tuning: strategies, limits, trial names, best job, counters, early stopping, warm start."""

from __future__ import annotations

import re
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import pytest
from botocore.exceptions import ClientError

from retrain.embedded.faults import Faults
from retrain.embedded.sagemaker import SageMakerEmulator

from .conftest import put_images, training_request, wait_until

TERMINAL = ("Completed", "Failed", "Stopped")


def tuning_request(
    name: str, *, strategy: str = "Bayesian", jobs: int = 3, parallel: int = 2, **extra: Any
) -> dict[str, Any]:
    definition = training_request("unused")
    del definition["TrainingJobName"]
    static = definition.pop("HyperParameters")
    static.pop("lr")
    definition["StaticHyperParameters"] = static
    ranges: dict[str, Any] = {
        "ContinuousParameterRanges": [
            {"Name": "lr", "MinValue": "0.001", "MaxValue": "0.2", "ScalingType": "Logarithmic"}
        ],
        "CategoricalParameterRanges": [{"Name": "optimizer", "Values": ["sgd", "adamw"]}],
    }
    config = {
        "Strategy": strategy,
        "HyperParameterTuningJobObjective": {"Type": "Maximize", "MetricName": "val-accuracy"},
        "ResourceLimits": {"MaxNumberOfTrainingJobs": jobs, "MaxParallelTrainingJobs": parallel},
        "ParameterRanges": extra.pop("ranges", ranges),
        "TrainingJobEarlyStoppingType": extra.pop("early_stopping", "Off"),
    }
    return {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobConfig": config,
        "TrainingJobDefinition": definition,
        **extra,
    }


def wait_tuning(emulator: SageMakerEmulator, name: str, timeout: float = 90) -> dict[str, Any]:
    wait_until(
        lambda: (
            emulator.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)[
                "HyperParameterTuningJobStatus"
            ]
            in TERMINAL
        ),
        timeout,
        f"tuning job {name}",
    )
    return emulator.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)


def test_tuning_runs_the_trials_within_the_parallel_limit_and_reports_the_best(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator]
) -> None:
    # GIVEN a Bayesian tuning job of 3 trials, 2 at a time
    put_images(aws["s3"], "data/train")
    emulator = make_emulator(tuning_seed=1)

    # WHEN it runs
    arn = emulator.create_hyper_parameter_tuning_job(**tuning_request("tune"))["HyperParameterTuningJobArn"]
    job = wait_tuning(emulator, "tune")
    trials = emulator.list_training_jobs_for_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune")[
        "TrainingJobSummaries"
    ]

    # THEN 3 trials named like the service's ran, never more than 2 at once, and the best is the top objective
    assert arn.endswith(":hyper-parameter-tuning-job/tune")
    assert job["HyperParameterTuningJobStatus"] == "Completed"
    assert len(trials) == 3
    assert all(re.fullmatch(r"tune-00[123]-[0-9a-f]{8}", t["TrainingJobName"]) for t in trials)
    assert job["TrainingJobStatusCounters"] == {
        "Completed": 3,
        "InProgress": 0,
        "RetryableError": 0,
        "NonRetryableError": 0,
        "Stopped": 0,
    }
    assert job["ObjectiveStatusCounters"] == {"Succeeded": 3, "Pending": 0, "Failed": 0}
    windows = []
    for trial in trials:
        described = emulator.describe_training_job(TrainingJobName=trial["TrainingJobName"])
        assert described["TuningJobArn"] == arn
        assert described["HyperParameters"].keys() == {
            "epochs",
            "steps-per-epoch",
            "lr",
            "optimizer",
            "_tuning_objective_metric",
        }
        assert 0.001 <= float(described["HyperParameters"]["lr"]) <= 0.2
        windows.append((described["CreationTime"], described["TrainingEndTime"]))
    for start, _ in windows:
        assert sum(s <= start < e for s, e in windows) <= 2
    best_value = max(t["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] for t in trials)
    assert job["BestTrainingJob"]["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] == best_value
    assert job["BestTrainingJob"]["ObjectiveStatus"] == "Succeeded"


def test_grid_strategy_runs_each_combination_once(emulator: SageMakerEmulator) -> None:
    # GIVEN a grid of two learning rates and no job limit
    ranges = {"CategoricalParameterRanges": [{"Name": "lr", "Values": ["0.05", "0.1"]}]}
    request = tuning_request("grid", strategy="Grid", jobs=0, parallel=2, ranges=ranges)
    del request["HyperParameterTuningJobConfig"]["ResourceLimits"]["MaxNumberOfTrainingJobs"]

    # WHEN it runs
    emulator.create_hyper_parameter_tuning_job(**request)
    job = wait_tuning(emulator, "grid")

    # THEN each point ran once and lr=0.05 (the stand-in's optimum) is best
    trials = emulator.list_training_jobs_for_hyper_parameter_tuning_job(HyperParameterTuningJobName="grid")
    assert sorted(t["TunedHyperParameters"]["lr"] for t in trials["TrainingJobSummaries"]) == ["0.05", "0.1"]
    assert job["BestTrainingJob"]["TunedHyperParameters"] == {"lr": "0.05"}


def test_early_stopping_auto_stops_a_trial_worse_than_the_median(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator]
) -> None:
    # GIVEN sequential trials with early stopping where one learning rate is far worse than the other two
    put_images(aws["s3"], "data/train")
    emulator = make_emulator(early_stopping_startup_trials=1, tuning_seed=0)
    ranges = {"CategoricalParameterRanges": [{"Name": "lr", "Values": ["0.05", "0.1", "0.2"]}]}
    request = tuning_request(
        "early", strategy="Grid", jobs=3, parallel=1, ranges=ranges, early_stopping="Auto"
    )
    request["TrainingJobDefinition"]["StaticHyperParameters"]["epochs"] = "4"

    # WHEN it runs
    emulator.create_hyper_parameter_tuning_job(**request)
    job = wait_tuning(emulator, "early")

    # THEN at least one worse trial was stopped early and still reports its objective
    assert job["HyperParameterTuningJobStatus"] == "Completed"
    assert job["TrainingJobStatusCounters"]["Stopped"] >= 1
    assert job["ObjectiveStatusCounters"]["Succeeded"] == 3
    assert job["BestTrainingJob"]["TunedHyperParameters"] == {"lr": "0.05"}


def test_warm_start_sees_the_parent_trials_across_a_restart(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator], tmp_path: Any
) -> None:
    # GIVEN a finished parent tuning job whose best trial has the optimum lr, recorded on disk
    put_images(aws["s3"], "data/train")
    workdir = tmp_path / "persisted"
    parent = make_emulator(workdir=workdir)
    ranges = {"CategoricalParameterRanges": [{"Name": "lr", "Values": ["0.05", "0.1", "0.2"]}]}
    parent.create_hyper_parameter_tuning_job(
        **tuning_request("parent", strategy="Grid", jobs=0, parallel=2, ranges=ranges)
    )
    parent_job = wait_tuning(parent, "parent")
    parent.close()

    # WHEN a new emulator on the same work dir warm-starts a child from it with a narrower range
    child = make_emulator(workdir=workdir)
    child_ranges = {"CategoricalParameterRanges": [{"Name": "lr", "Values": ["0.1", "0.2"]}]}
    warm = {
        "ParentHyperParameterTuningJobs": [{"HyperParameterTuningJobName": "parent"}],
        "WarmStartType": "TransferLearning",
    }
    child.create_hyper_parameter_tuning_job(
        **tuning_request(
            "child", strategy="Grid", jobs=0, parallel=2, ranges=child_ranges, WarmStartConfig=warm
        )
    )
    child_job = wait_tuning(child, "child")

    # THEN the child's own best is among its trials, and the overall best is the parent's optimum trial
    assert child_job["WarmStartConfig"] == warm
    assert child_job["BestTrainingJob"]["TunedHyperParameters"]["lr"] in ("0.1", "0.2")
    assert (
        child_job["OverallBestTrainingJob"]["TrainingJobName"]
        == parent_job["BestTrainingJob"]["TrainingJobName"]
    )
    # the parent's lr=0.05 trial lies outside the child's range; the other two seed the child's study
    assert child._tuning["child"]["WarmStartedTrials"] == 2


def _finished_parent(emulator: SageMakerEmulator) -> dict[str, Any]:
    """A one-trial parent: static epochs and steps-per-epoch, lr tuned (3 hyperparameters)."""
    ranges = {"CategoricalParameterRanges": [{"Name": "lr", "Values": ["0.1"]}]}
    emulator.create_hyper_parameter_tuning_job(
        **tuning_request("parent", strategy="Grid", jobs=0, parallel=1, ranges=ranges)
    )
    return wait_tuning(emulator, "parent")


WARM_FROM_PARENT = {
    "ParentHyperParameterTuningJobs": [{"HyperParameterTuningJobName": "parent"}],
    "WarmStartType": "TransferLearning",
}


def _warm_child(ranges: dict[str, Any]) -> dict[str, Any]:
    """A one-trial Grid job that warm-starts from `parent`."""
    return tuning_request(
        "child", strategy="Grid", jobs=0, parallel=1, ranges=ranges, WarmStartConfig=WARM_FROM_PARENT
    )


def test_warm_start_with_more_hyperparameters_than_the_parent_is_refused(emulator: SageMakerEmulator) -> None:
    # GIVEN a finished parent with 3 hyperparameters, and a child that adds a static one (as a run from
    # weights adds `pretrained` to a data set whose first run started from scratch)
    _finished_parent(emulator)
    child = _warm_child({"CategoricalParameterRanges": [{"Name": "lr", "Values": ["0.1"]}]})
    child["TrainingJobDefinition"]["StaticHyperParameters"]["pretrained"] = "model.tar.gz"
    # WHEN it is created THEN SageMaker's rule refuses it, naming both counts
    with pytest.raises(ClientError) as error:
        emulator.create_hyper_parameter_tuning_job(**child)
    assert error.value.response["Error"]["Code"] == "ValidationException"
    assert "static plus tunable hyperparameters (4)" in error.value.response["Error"]["Message"]
    assert "'parent' (3)" in error.value.response["Error"]["Message"]


def test_warm_start_may_move_a_hyperparameter_between_static_and_tunable(emulator: SageMakerEmulator) -> None:
    # GIVEN a finished parent that tuned lr with epochs static
    _finished_parent(emulator)
    # WHEN a child tunes epochs and keeps lr static: still 3 hyperparameters
    child = _warm_child({"CategoricalParameterRanges": [{"Name": "epochs", "Values": ["1"]}]})
    static = child["TrainingJobDefinition"]["StaticHyperParameters"]
    del static["epochs"]
    static["lr"] = "0.1"
    emulator.create_hyper_parameter_tuning_job(**child)
    # THEN it is accepted and runs
    assert wait_tuning(emulator, "child")["HyperParameterTuningJobStatus"] == "Completed"


def test_warm_start_from_an_unknown_parent_is_refused(
    make_emulator: Callable[..., SageMakerEmulator],
) -> None:
    warm = {
        "ParentHyperParameterTuningJobs": [{"HyperParameterTuningJobName": "ghost"}],
        "WarmStartType": "TransferLearning",
    }
    with pytest.raises(ClientError) as error:
        make_emulator().create_hyper_parameter_tuning_job(**tuning_request("orphan", WarmStartConfig=warm))
    assert error.value.response["Error"]["Code"] == "ValidationException"
    assert "'ghost' does not exist" in error.value.response["Error"]["Message"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"Strategy": "Hyperband"}, "Strategy 'Hyperband' is not supported"),
        ({"HyperParameterTuningJobObjective": {"Type": "Maximize", "MetricName": "f1"}}, "not among"),
        (
            {
                "ParameterRanges": {
                    "ContinuousParameterRanges": [
                        {"Name": "lr", "MinValue": "0", "MaxValue": "1", "ScalingType": "Logarithmic"}
                    ]
                }
            },
            "Logarithmic scaling needs MinValue > 0",
        ),
        ({"Strategy": "Grid"}, "categorical parameter ranges only"),
        (
            {
                "ParameterRanges": {
                    "IntegerParameterRanges": [{"Name": "epochs", "MinValue": "1", "MaxValue": "3"}]
                }
            },
            "both static and tunable",
        ),
    ],
)
def test_invalid_tuning_configs_are_refused(
    make_emulator: Callable[..., SageMakerEmulator], change: dict[str, Any], message: str
) -> None:
    request = tuning_request("bad-config")
    request["HyperParameterTuningJobConfig"].update(change)
    with pytest.raises(ClientError) as error:
        make_emulator().create_hyper_parameter_tuning_job(**request)
    assert error.value.response["Error"]["Code"] == "ValidationException"
    assert message in error.value.response["Error"]["Message"]


def test_describe_unknown_tuning_job_is_resource_not_found(
    make_emulator: Callable[..., SageMakerEmulator],
) -> None:
    with pytest.raises(ClientError) as error:
        make_emulator().describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="nothing")
    assert error.value.response["Error"]["Code"] == "ResourceNotFound"


def test_stopping_a_tuning_job_stops_its_running_trials(emulator: SageMakerEmulator) -> None:
    # GIVEN a tuning job with slow trials running
    request = tuning_request("halt", jobs=4, parallel=2)
    request["TrainingJobDefinition"]["StaticHyperParameters"].update({"epochs": "50", "step-seconds": "0.1"})
    emulator.create_hyper_parameter_tuning_job(**request)
    wait_until(
        lambda: (
            emulator.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="halt")[
                "TrainingJobStatusCounters"
            ]["InProgress"]
            == 2
        ),
        30,
        "two running trials",
    )

    # WHEN it is stopped
    emulator.stop_hyper_parameter_tuning_job(HyperParameterTuningJobName="halt")
    job = wait_tuning(emulator, "halt")

    # THEN it and its trials end Stopped and no further trial starts
    trials = emulator.list_training_jobs_for_hyper_parameter_tuning_job(HyperParameterTuningJobName="halt")[
        "TrainingJobSummaries"
    ]
    ended = [
        {
            k: v
            for k, v in emulator.describe_training_job(TrainingJobName=t["TrainingJobName"]).items()
            if k in ("TrainingJobStatus", "SecondaryStatusTransitions", "FailureReason")
        }
        for t in trials
    ]
    assert job["HyperParameterTuningJobStatus"] == "Stopped"
    assert job["TrainingJobStatusCounters"]["Stopped"] == 2, ended
    assert sum(job["TrainingJobStatusCounters"].values()) == 2


def test_trials_meet_an_injected_create_training_job_error_and_are_asked_again(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator]
) -> None:
    # GIVEN the fault that makes CreateTrainingJob answer ResourceLimitExceeded twice
    put_images(aws["s3"], "data/train")
    faults = Faults.parse(["resource-limit:2"])
    emulator = make_emulator(faults=faults)

    # WHEN a tuning job creates its one trial
    emulator.create_hyper_parameter_tuning_job(
        **tuning_request("limited", strategy="Random", jobs=1, parallel=1)
    )
    job = wait_tuning(emulator, "limited")

    # THEN its CreateTrainingJob calls met the injected error, both times, and the third made the trial
    assert job["HyperParameterTuningJobStatus"] == "Completed", job.get("FailureReason")
    assert job["TrainingJobStatusCounters"]["Completed"] == 1
    refused = emulator._tuning["limited"]["LastLaunchError"]
    assert "(ResourceLimitExceeded) when calling the CreateTrainingJob operation" in refused
    assert "'ml.g5.xlarge for spot training job usage' is 1 Instances" in refused
    assert faults.create_training_job_error("after") is None  # the fault fired its two times


def test_trials_wait_for_account_capacity_instead_of_failing(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator]
) -> None:
    # GIVEN an account that runs one training job at a time and a tuning job asking for two in parallel
    put_images(aws["s3"], "data/train")
    emulator = make_emulator(max_concurrent_training_jobs=1)

    # WHEN it runs
    emulator.create_hyper_parameter_tuning_job(
        **tuning_request("capacity", strategy="Random", jobs=3, parallel=2)
    )
    job = wait_tuning(emulator, "capacity")

    # THEN all three trials completed, one after another, never two at once
    assert job["HyperParameterTuningJobStatus"] == "Completed", job.get("FailureReason")
    assert job["TrainingJobStatusCounters"]["Completed"] == 3
    trials = emulator.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="capacity"
    )["TrainingJobSummaries"]
    runs = sorted((t["TrainingStartTime"], t["TrainingEndTime"], t["TrainingJobName"][:12]) for t in trials)
    assert [name for _, _, name in runs] == ["capacity-001", "capacity-002", "capacity-003"]
    for (_, ended, before), (started, _, after) in pairwise(runs):
        assert started >= ended, f"{after} started at {started}, before {before} ended at {ended}"
    # AND the tuning job did ask for a second trial while one ran, and met ResourceLimitExceeded
    refused = emulator._tuning["capacity"]["LastLaunchError"]
    assert "(ResourceLimitExceeded) when calling the CreateTrainingJob operation" in refused
    assert "'Number of concurrent training jobs' is 1 jobs, with current utilization of 1 jobs" in refused
