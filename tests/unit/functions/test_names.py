"""Every name a run derives for an AWS resource fits its API's pattern and length (botocore's model)."""

from __future__ import annotations

import pytest

from controller import checkpoint_eval, datasets, names, prepare
from retrain.embedded.gatekeeper import contracts
from retrain.run.start import execution_name

# The longest data set name ingest accepts, with every character it allows.
WORST_DATASET = "9_a-" + "b_" * 18
LONG_EXECUTION = "arn:aws:states:us-east-1:123456789012:execution:retrain-training:" + "m" * 80


def test_the_worst_data_set_name_is_one_ingest_accepts() -> None:
    assert len(WORST_DATASET) == names.MAX_DATASET_LENGTH and names.DATASET_RE.fullmatch(WORST_DATASET)


@pytest.mark.parametrize("prefix", ["retrain-", "p" * names.MAX_MODEL_PACKAGE_GROUP_PREFIX])
def test_a_model_package_group_name_fits_sagemakers_pattern_for_any_data_set(prefix: str) -> None:
    # GIVEN a data set name with '_' (which SageMaker's names refuse) and the longest prefix
    group = names.model_package_group(prefix, WORST_DATASET)
    # THEN CreateModelPackageGroup accepts the derived name
    contracts.check("sagemaker", "CreateModelPackageGroup", {"ModelPackageGroupName": group})
    assert group.startswith(prefix)


def test_model_package_groups_of_names_that_differ_only_in_underscores_stay_apart() -> None:
    assert names.model_package_group("retrain-", "my_flowers") != names.model_package_group(
        "retrain-", "my-flowers"
    )
    assert names.model_package_group("retrain-", "flowers") == "retrain-flowers"  # plain names are kept


def test_every_job_name_of_a_run_fits_its_api() -> None:
    jobs = prepare.job_names(WORST_DATASET, LONG_EXECUTION)
    contracts.check(
        "sagemaker", "DescribeHyperParameterTuningJob", {"HyperParameterTuningJobName": jobs["tuning"]}
    )
    for key in ("training", "rules", "challenger", "champion"):
        contracts.check("sagemaker", "DescribeTrainingJob", {"TrainingJobName": jobs[key]})
        contracts.check("sagemaker", "DescribeProcessingJob", {"ProcessingJobName": jobs[key]})
    checkpoint_job = checkpoint_eval.job_name(jobs["training"] + "-001-abcdef12", 123456789)
    contracts.check("sagemaker", "DescribeProcessingJob", {"ProcessingJobName": checkpoint_job})


def test_the_fsx_idempotency_token_fits_even_for_the_longest_execution_name() -> None:
    # GIVEN an execution name of 80 characters (Step Functions' limit), which the token used to be
    token = names.import_token(LONG_EXECUTION)
    # THEN CreateDataRepositoryTask accepts it (at most 63 of [A-Za-z0-9_.-]) and it is stable per execution
    contracts.check(
        "fsx",
        "CreateDataRepositoryTask",
        {
            "Type": "IMPORT_METADATA_FROM_REPOSITORY",
            "FileSystemId": "fs-0123456789abcdef0",
            "Report": {"Enabled": False},
            "ClientRequestToken": token,
        },
    )
    assert token == names.import_token(LONG_EXECUTION) != names.import_token(LONG_EXECUTION + "x")


def test_execution_names_fit_step_functions() -> None:
    arn = "arn:aws:states:us-east-1:123456789012:stateMachine:retrain-training"
    for name in (datasets.run_id_for(WORST_DATASET, 99999), execution_name(WORST_DATASET)):
        contracts.check("stepfunctions", "StartExecution", {"stateMachineArn": arn, "name": name})
