"""Picking the best candidate (best_candidate.py): the tuning job's own answer, and the run's seconds."""

from __future__ import annotations

from typing import Any

from controller import best_candidate, job_ended, runs

DATASET, RUN, TUNING = "flowers", "flowers-00001", "tune"


class _Tuning:
    """SageMaker's answers about one finished tuning job of `trials` trials (each 100 s, 30 billable),
    recording every call."""

    def __init__(self, trials: int) -> None:
        self.trials = [f"{TUNING}-{i:03d}-abcd1234" for i in range(1, trials + 1)]
        self.calls: list[str] = []

    def describe_hyper_parameter_tuning_job(self, HyperParameterTuningJobName: str) -> dict[str, Any]:  # noqa: N803
        self.calls.append("DescribeHyperParameterTuningJob")
        return {
            "HyperParameterTuningJobName": HyperParameterTuningJobName,
            "HyperParameterTuningJobStatus": "Completed",
            "TrainingJobStatusCounters": {
                "Completed": len(self.trials),
                "InProgress": 0,
                "RetryableError": 0,
                "NonRetryableError": 0,
                "Stopped": 0,
            },
        }

    def list_training_jobs_for_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]:
        self.calls.append("ListTrainingJobsForHyperParameterTuningJob")
        start = int(request.get("NextToken") or 0)
        page = self.trials[start : start + request["MaxResults"]]
        more = start + len(page) < len(self.trials)
        return {
            "TrainingJobSummaries": [{"TrainingJobName": t, "TrainingJobStatus": "Completed"} for t in page],
            **({"NextToken": str(start + len(page))} if more else {}),
        }

    def describe_training_job(self, TrainingJobName: str) -> dict[str, Any]:  # noqa: N803
        self.calls.append(f"DescribeTrainingJob {TrainingJobName}")
        return {
            "TrainingJobName": TrainingJobName,
            "TuningJobArn": f"arn:aws:sagemaker:us-east-1:123456789012:hyper-parameter-tuning-job/{TUNING}",
            "TrainingTimeInSeconds": 100,
            "BillableTimeInSeconds": 30,
            "ModelArtifacts": {"S3ModelArtifacts": f"s3://artifacts/{TrainingJobName}/output/model.tar.gz"},
        }


def _event(best: str) -> dict[str, Any]:
    return {
        "run": {
            "dataset": DATASET,
            "run_id": RUN,
            "static_hyperparameters": {"epochs": "3"},
            "parameter_ranges": {
                "ContinuousParameterRanges": [{"Name": "lr", "MinValue": "0.001", "MaxValue": "0.1"}],
                "CategoricalParameterRanges": [{"Name": "optimizer", "Values": ["sgd", "adamw"]}],
            },
        },
        "tuning": {
            "name": TUNING,
            "best": {
                "TrainingJobName": best,
                "TunedHyperParameters": {"lr": "0.05", "optimizer": '"sgd"'},
                "FinalHyperParameterTuningJobObjectiveMetric": {"MetricName": "val-accuracy", "Value": 0.9},
            },
        },
    }


def _count_ended(aws: Any, config: Any, sagemaker: _Tuning, trials: list[str]) -> None:
    """What job_ended.py did as these trials ended."""
    for trial in trials:
        job_ended.count_trial(
            DATASET,
            RUN,
            sagemaker.describe_training_job(TrainingJobName=trial),
            config=config,
            dynamodb=aws.dynamodb,
        )
    sagemaker.calls.clear()


def _running_run(aws: Any) -> None:
    runs.put_run(
        {"dataset": DATASET, "run_id": RUN, "status": "RUNNING"},
        table_name=aws.runs_table,
        client=aws.dynamodb,
    )


def test_the_best_of_500_trials_is_picked_without_describing_every_trial(aws, config):
    # GIVEN a finished tuning job of 500 trials whose ends were all counted as they came
    _running_run(aws)
    sagemaker = _Tuning(500)
    _count_ended(aws, config, sagemaker, sagemaker.trials)
    best = sagemaker.trials[41]
    # WHEN the best candidate is picked
    picked = best_candidate.pick(_event(best), config=config, dynamodb=aws.dynamodb, sagemaker=sagemaker)  # type: ignore[arg-type]
    # THEN it took the tuning job's own answer: one description of the tuning job, one of the best trial
    assert sorted(sagemaker.calls) == ["DescribeHyperParameterTuningJob", f"DescribeTrainingJob {best}"]
    assert picked == {
        "training_job": best,
        "model_data": f"s3://artifacts/{best}/output/model.tar.gz",
        "hyperparameters": {"epochs": "3", "lr": "0.05", "optimizer": "sgd"},
    }
    # AND the run's totals are every trial's seconds
    record = runs.get_run(DATASET, RUN, table_name=aws.runs_table, client=aws.dynamodb)
    assert record is not None
    assert (record["training_seconds"], record["billable_seconds"]) == (500 * 100, 500 * 30)
    assert record["spot_saving"] == 0.7 and record["best_training_job"] == best
    # AND the data set's next run may warm-start from this tuning job with the same hyperparameters
    row = aws.dynamodb.get_item(TableName=aws.datasets_table, Key={"dataset": {"S": DATASET}})["Item"]
    assert runs.deserialize(row)["last_tuning_job"] == TUNING
    assert runs.deserialize(row)["last_tuning_hyperparameters"] == ["epochs", "lr", "optimizer"]


def test_trials_whose_end_was_not_counted_yet_are_counted_by_the_pick(aws, config):
    # GIVEN a finished tuning job of 150 trials, the end events of two of them not handled yet
    _running_run(aws)
    sagemaker = _Tuning(150)
    late = {sagemaker.trials[7], sagemaker.trials[120]}
    _count_ended(aws, config, sagemaker, [t for t in sagemaker.trials if t not in late])
    # WHEN the best candidate is picked
    best_candidate.pick(
        _event(sagemaker.trials[0]), config=config, dynamodb=aws.dynamodb, sagemaker=sagemaker
    )  # type: ignore[arg-type]
    # THEN it listed the trials (two pages) and described only the best and the two missing ones
    described = {c.removeprefix("DescribeTrainingJob ") for c in sagemaker.calls if c.startswith("Describe")}
    assert described == {"DescribeHyperParameterTuningJob", sagemaker.trials[0], *late}
    assert sagemaker.calls.count("ListTrainingJobsForHyperParameterTuningJob") == 2
    # AND the totals count every trial once
    record = runs.get_run(DATASET, RUN, table_name=aws.runs_table, client=aws.dynamodb)
    assert record is not None
    assert (record["training_seconds"], record["billable_seconds"]) == (150 * 100, 150 * 30)
    # AND a late end event after the pick adds nothing
    job_ended.count_trial(
        DATASET,
        RUN,
        sagemaker.describe_training_job(TrainingJobName=sagemaker.trials[7]),
        config=config,
        dynamodb=aws.dynamodb,
    )
    again = runs.get_run(DATASET, RUN, table_name=aws.runs_table, client=aws.dynamodb)
    assert again is not None and again["training_seconds"] == 150 * 100
