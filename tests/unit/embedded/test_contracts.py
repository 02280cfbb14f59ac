"""AWS's input contract: the constraints botocore's own validator skips, worded as AWS words them."""

from __future__ import annotations

import copy
import datetime
import pickle
from typing import Any

import botocore.session
import pytest

from retrain.embedded.gatekeeper.contracts import (
    UNCHECKED_PATTERNS,
    ContractError,
    Violation,
    check,
    prepare,
    violations,
)

ROLE_ARN = "arn:aws:iam::123456789012:role/retrain-sagemaker-execution"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/retrain-training:latest"
METRIC_REGEX = "(?:^|\\s)val-accuracy: ([-+]?[0-9]*\\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
FILE_SYSTEM_ID = "fs-0123456789abcdef0"
TRAINING_JOB: dict[str, Any] = {
    "TrainingJobName": "retrain-flowers-20240101-abcdef",
    "HyperParameters": {"epochs": "10", "learning-rate": "0.001", "optimizer": "sgd"},
    "AlgorithmSpecification": {
        "TrainingImage": IMAGE,
        "TrainingInputMode": "File",
        "MetricDefinitions": [{"Name": "val-accuracy", "Regex": METRIC_REGEX}],
        "EnableSageMakerMetricsTimeSeries": True,
    },
    "RoleArn": ROLE_ARN,
    "InputDataConfig": [
        {
            "ChannelName": "manifest",
            "DataSource": {
                "S3DataSource": {
                    "S3DataType": "S3Prefix",
                    "S3Uri": "s3://retrain-data-123456789012/manifests/flowers/",
                    "S3DataDistributionType": "FullyReplicated",
                }
            },
            "ContentType": "application/json",
            "InputMode": "File",
        },
        {
            "ChannelName": "train",
            "DataSource": {
                "FileSystemDataSource": {
                    "FileSystemId": FILE_SYSTEM_ID,
                    "FileSystemType": "FSxLustre",
                    "FileSystemAccessMode": "ro",
                    "DirectoryPath": "/abcdefgh/data/flowers",
                }
            },
        },
    ],
    "OutputDataConfig": {"S3OutputPath": "s3://retrain-artifacts-123456789012/training/"},
    "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 50},
    "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    "CheckpointConfig": {
        "S3Uri": "s3://retrain-artifacts-123456789012/checkpoints/retrain-flowers-20240101-abcdef/",
        "LocalPath": "/opt/ml/checkpoints",
    },
    "VpcConfig": {"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": ["subnet-0123456789abcdef0"]},
    "Tags": [
        {"Key": "project", "Value": "retrain"},
        {"Key": "aws:cloudformation:stack-name", "Value": "dev"},
    ],
    "Environment": {"RETRAIN_LOG_LEVEL": "INFO"},
    "EnableManagedSpotTraining": False,
}
TUNING_JOB: dict[str, Any] = {
    "HyperParameterTuningJobName": "retrain-tune-20240101",
    "HyperParameterTuningJobConfig": {
        "Strategy": "Bayesian",
        "HyperParameterTuningJobObjective": {"Type": "Maximize", "MetricName": "val-accuracy"},
        "ResourceLimits": {"MaxNumberOfTrainingJobs": 4, "MaxParallelTrainingJobs": 2},
        "ParameterRanges": {
            "ContinuousParameterRanges": [{"Name": "learning-rate", "MinValue": "0.0001", "MaxValue": "0.1"}]
        },
    },
    "TrainingJobDefinition": {
        "StaticHyperParameters": {"epochs": "10"},
        "AlgorithmSpecification": {
            "TrainingImage": IMAGE,
            "TrainingInputMode": "File",
            "MetricDefinitions": [{"Name": "val-accuracy", "Regex": METRIC_REGEX}],
        },
        "RoleArn": ROLE_ARN,
        "InputDataConfig": copy.deepcopy(TRAINING_JOB["InputDataConfig"]),
        "OutputDataConfig": {"S3OutputPath": "s3://retrain-artifacts-123456789012/tuning/"},
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 50},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    },
}
DATA_REPOSITORY_TASK: dict[str, Any] = {
    "FileSystemId": FILE_SYSTEM_ID,
    "Type": "IMPORT_METADATA_FROM_REPOSITORY",
    "Paths": ["data/flowers"],
    "Report": {"Enabled": False},
}
STATE_MACHINE_ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:retrain"
# The operations the embedded stack serves, by service.
OPERATIONS = [
    *(
        ("sagemaker", name)
        for name in (
            "CreateTrainingJob",
            "CreateHyperParameterTuningJob",
            "CreateProcessingJob",
            "DescribeTrainingJob",
            "CreateModelPackage",
            "CreateModelPackageGroup",
            "DescribeModelPackageGroup",
            "ListTrainingJobsForHyperParameterTuningJob",
            "AddTags",
            "ListTags",
        )
    ),
    ("fsx", "CreateDataRepositoryTask"),
    ("fsx", "DescribeDataRepositoryTasks"),
    ("fsx", "DescribeFileSystems"),
    ("stepfunctions", "StartExecution"),
    ("stepfunctions", "DescribeExecution"),
    ("sns", "Publish"),
    ("dynamodb", "GetItem"),
    ("dynamodb", "PutItem"),
    ("dynamodb", "UpdateItem"),
    ("dynamodb", "Query"),
    ("s3", "GetObject"),
    ("s3", "PutObject"),
    ("lambda", "Invoke"),
    ("events", "PutEvents"),
]


def _refusal(service: str, operation: str, params: dict[str, Any]) -> ContractError:
    with pytest.raises(ContractError) as caught:
        check(service, operation, params)
    return caught.value


def _tuning_job(**changes: Any) -> dict[str, Any]:
    request = copy.deepcopy(TUNING_JOB)
    request.update(changes)
    return request


def test_a_full_training_job_request_passes() -> None:
    # GIVEN a realistic CreateTrainingJob request: S3 and FSx channels, VPC, checkpoints, tags, environment
    # WHEN it is checked
    # THEN it breaks no constraint
    assert violations("sagemaker", "CreateTrainingJob", TRAINING_JOB) == []
    check("sagemaker", "CreateTrainingJob", TRAINING_JOB)


def test_a_full_tuning_job_request_passes() -> None:
    # GIVEN a realistic CreateHyperParameterTuningJob request
    # WHEN it is checked
    # THEN it breaks no constraint
    assert violations("sagemaker", "CreateHyperParameterTuningJob", TUNING_JOB) == []


def test_the_model_package_group_pattern_is_botocores_own_unanchored_text() -> None:
    # GIVEN botocore 1.43's model, which carries EntityName's pattern without AWS's ^...$ anchors
    model = botocore.session.get_session().get_service_model("sagemaker")
    # WHEN its pattern is read
    pattern = model.shape_for("EntityName").metadata["pattern"]
    # THEN it is the text the refusal below quotes
    assert pattern == "[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}"


def test_an_underscore_in_a_model_package_group_name_is_refused() -> None:
    # GIVEN a model package group name with an underscore
    # WHEN CreateModelPackageGroup is checked
    error = _refusal("sagemaker", "CreateModelPackageGroup", {"ModelPackageGroupName": "retrain-my_flowers"})
    # THEN AWS's ValidationException names the member and the whole pattern
    assert error.code == "ValidationException"
    assert error.message == (
        "1 validation error detected: Value 'retrain-my_flowers' at 'modelPackageGroupName' failed to "
        "satisfy constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}"
    )
    assert error.violations == (
        Violation(
            "modelPackageGroupName",
            "Member must satisfy regular expression pattern: [a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}",
            "retrain-my_flowers",
        ),
    )


def test_a_pattern_must_match_the_whole_value() -> None:
    # GIVEN a name whose start matches EntityName's unanchored pattern but whose end does not
    # WHEN it is checked
    found = violations("sagemaker", "CreateModelPackageGroup", {"ModelPackageGroupName": "flowers-"})
    # THEN the pattern is broken: Coral matches the whole value
    assert [violation.message for violation in found] == [
        "Member must satisfy regular expression pattern: [a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}"
    ]


def test_a_33_character_tuning_job_name_is_too_long() -> None:
    # GIVEN a tuning job name of 33 characters (the pattern's {0,31} breaks too)
    name = "r" * 33
    # WHEN CreateHyperParameterTuningJob is checked
    error = _refusal(
        "sagemaker", "CreateHyperParameterTuningJob", _tuning_job(HyperParameterTuningJobName=name)
    )
    # THEN the length limit is among the violations
    assert error.code == "ValidationException"
    assert (
        f"Value '{name}' at 'hyperParameterTuningJobName' failed to satisfy constraint: "
        "Member must have length less than or equal to 32"
    ) in error.message
    assert error.message.startswith("2 validation errors detected: ")


def test_a_64_character_client_request_token_is_too_long() -> None:
    # GIVEN a 64-character ClientRequestToken (max 63)
    token = "t" * 64
    # WHEN CreateDataRepositoryTask is checked
    found = violations(
        "fsx", "CreateDataRepositoryTask", {**DATA_REPOSITORY_TASK, "ClientRequestToken": token}
    )
    # THEN its length is refused, and its pattern's {0,63} with it
    assert [(violation.path, violation.message) for violation in found] == [
        ("clientRequestToken", "Member must have length less than or equal to 63"),
        ("clientRequestToken", "Member must satisfy regular expression pattern: [A-za-z0-9_.-]{0,63}$"),
    ]


def test_a_63_character_client_request_token_passes() -> None:
    # GIVEN a 63-character ClientRequestToken
    request = {**DATA_REPOSITORY_TASK, "ClientRequestToken": "retrain-" + "0" * 55}
    # WHEN CreateDataRepositoryTask is checked
    # THEN nothing is refused
    assert violations("fsx", "CreateDataRepositoryTask", request) == []


def test_an_81_character_execution_name_is_refused() -> None:
    # GIVEN an execution name of 81 characters (max 80)
    name = "n" * 81
    # WHEN StartExecution is checked
    error = _refusal("stepfunctions", "StartExecution", {"stateMachineArn": STATE_MACHINE_ARN, "name": name})
    # THEN the refusal is at 'name'
    assert error.message == (
        f"1 validation error detected: Value '{name}' at 'name' failed to satisfy constraint: "
        "Member must have length less than or equal to 80"
    )


def test_a_value_outside_the_enum_is_refused() -> None:
    # GIVEN a data repository task type that is not in the model's enum
    request = {**DATA_REPOSITORY_TASK, "Type": "IMPORT"}
    # WHEN CreateDataRepositoryTask is checked
    error = _refusal("fsx", "CreateDataRepositoryTask", request)
    # THEN the enum's whole value set is quoted
    assert error.message == (
        "1 validation error detected: Value 'IMPORT' at 'type' failed to satisfy constraint: Member must "
        "satisfy enum value set: [EXPORT_TO_REPOSITORY, IMPORT_METADATA_FROM_REPOSITORY, "
        "RELEASE_DATA_FROM_FILESYSTEM, AUTO_RELEASE_DATA]"
    )


def test_an_integer_above_its_maximum_is_refused() -> None:
    # GIVEN MaxResults of 101 (max 100)
    request = {"HyperParameterTuningJobName": "retrain-tune", "MaxResults": 101}
    # WHEN ListTrainingJobsForHyperParameterTuningJob is checked
    error = _refusal("sagemaker", "ListTrainingJobsForHyperParameterTuningJob", request)
    # THEN the value limit is refused
    assert error.message == (
        "1 validation error detected: Value '101' at 'maxResults' failed to satisfy constraint: "
        "Member must have value less than or equal to 100"
    )


def test_a_nested_integer_above_its_maximum_is_refused() -> None:
    # GIVEN a tuning job whose ResourceLimits.MaxRuntimeInSeconds is above its max (15768000)
    request = _tuning_job()
    request["HyperParameterTuningJobConfig"]["ResourceLimits"]["MaxRuntimeInSeconds"] = 15768001
    # WHEN CreateHyperParameterTuningJob is checked
    found = violations("sagemaker", "CreateHyperParameterTuningJob", request)
    # THEN the refusal is at the nested member
    assert found == [
        Violation(
            "hyperParameterTuningJobConfig.resourceLimits.maxRuntimeInSeconds",
            "Member must have value less than or equal to 15768000",
            15768001,
        )
    ]


def test_a_list_with_too_many_items_is_refused() -> None:
    # GIVEN 51 tags (TagList allows 50)
    tags = [{"Key": f"k{index}", "Value": "v"} for index in range(51)]
    # WHEN CreateModelPackageGroup is checked
    found = violations(
        "sagemaker", "CreateModelPackageGroup", {"ModelPackageGroupName": "flowers", "Tags": tags}
    )
    # THEN the list's item count is refused at 'tags'
    assert [(violation.path, violation.message) for violation in found] == [
        ("tags", "Member must have length less than or equal to 50")
    ]


def test_a_missing_required_member_must_not_be_null() -> None:
    # GIVEN a training job request without its RoleArn
    request = {name: value for name, value in TRAINING_JOB.items() if name != "RoleArn"}
    # WHEN CreateTrainingJob is checked
    error = _refusal("sagemaker", "CreateTrainingJob", request)
    # THEN AWS's null wording is used
    assert error.message == (
        "1 validation error detected: Value null at 'roleArn' failed to satisfy constraint: "
        "Member must not be null"
    )


def test_a_list_item_is_addressed_one_based_along_the_path() -> None:
    # GIVEN a tuning job whose first input channel has a 65-character name (max 64)
    request = _tuning_job()
    request["TrainingJobDefinition"]["InputDataConfig"][0]["ChannelName"] = "c" * 65
    # WHEN CreateHyperParameterTuningJob is checked
    found = violations("sagemaker", "CreateHyperParameterTuningJob", request)
    # THEN the path names the item by its 1-based index
    assert [(violation.path, violation.message) for violation in found] == [
        (
            "trainingJobDefinition.inputDataConfig.1.channelName",
            "Member must have length less than or equal to 64",
        )
    ]


def test_an_unknown_member_is_refused() -> None:
    # GIVEN a request with a member its input shape lacks
    request = {"ModelPackageGroupName": "flowers", "ModelPackageGroupTitle": "Flowers"}
    # WHEN CreateModelPackageGroup is checked
    error = _refusal("sagemaker", "CreateModelPackageGroup", request)
    # THEN the unknown member is a violation
    assert error.message == (
        "1 validation error detected: Value 'Flowers' at 'modelPackageGroupTitle' failed to satisfy "
        "constraint: Member is not a member of CreateModelPackageGroupInput"
    )


def test_a_value_of_the_wrong_type_is_refused() -> None:
    # GIVEN MaxResults as a string where the model has an integer
    request = {"HyperParameterTuningJobName": "retrain-tune", "MaxResults": "10"}
    # WHEN ListTrainingJobsForHyperParameterTuningJob is checked
    found = violations("sagemaker", "ListTrainingJobsForHyperParameterTuningJob", request)
    # THEN the type is refused
    assert found == [Violation("maxResults", "Member must be of type integer", "10")]


def test_a_boolean_is_not_an_integer() -> None:
    # GIVEN True where the model has an integer
    request = {"HyperParameterTuningJobName": "retrain-tune", "MaxResults": True}
    # WHEN it is checked
    found = violations("sagemaker", "ListTrainingJobsForHyperParameterTuningJob", request)
    # THEN the type is refused
    assert [violation.message for violation in found] == ["Member must be of type integer"]


def test_a_sensitive_member_is_not_shown() -> None:
    # GIVEN an execution input over its 262144-character limit (SensitiveData)
    secret = "s" * 262145
    request = {"stateMachineArn": STATE_MACHINE_ARN, "input": secret}
    # WHEN StartExecution is checked
    error = _refusal("stepfunctions", "StartExecution", request)
    # THEN the message omits the value, as AWS does, and the violation keeps only a mask
    assert error.message == (
        "1 validation error detected: Value at 'input' failed to satisfy constraint: "
        "Member must have length less than or equal to 262144"
    )
    assert error.violations == (
        Violation("input", "Member must have length less than or equal to 262144", "***", sensitive=True),
    )


def test_several_violations_are_counted_and_joined() -> None:
    # GIVEN an execution with an over-long name and a trace header that is not ASCII
    request = {"stateMachineArn": STATE_MACHINE_ARN, "name": "n" * 81, "traceHeader": "Root=é"}
    # WHEN StartExecution is checked
    error = _refusal("stepfunctions", "StartExecution", request)
    # THEN both are reported, counted, in one message
    assert error.message == (
        f"2 validation errors detected: Value '{'n' * 81}' at 'name' failed to satisfy constraint: "
        "Member must have length less than or equal to 80; Value 'Root=é' at 'traceHeader' failed to satisfy "
        "constraint: Member must satisfy regular expression pattern: \\p{ASCII}*"
    )


def test_a_long_value_is_cut_in_the_message() -> None:
    # GIVEN an execution name of 300 characters
    name = "n" * 300
    # WHEN StartExecution is checked
    error = _refusal("stepfunctions", "StartExecution", {"stateMachineArn": STATE_MACHINE_ARN, "name": name})
    # THEN the message shows its first 256 characters
    assert f"Value '{'n' * 256}...' at 'name'" in error.message


def test_map_keys_are_refused_with_the_key_shapes_constraints() -> None:
    # GIVEN a hyperparameter whose key is over 256 characters
    request = copy.deepcopy(TRAINING_JOB)
    request["HyperParameters"] = {"k" * 257: "1"}
    # WHEN CreateTrainingJob is checked
    found = violations("sagemaker", "CreateTrainingJob", request)
    # THEN one violation at the map lists the key shape's constraints, as AWS does
    assert [(violation.path, violation.message) for violation in found] == [
        (
            "hyperParameters",
            "Map keys must satisfy constraint: [Member must have length less than or equal to 256, "
            "Member must have length greater than or equal to 0, Member must satisfy regular expression "
            "pattern: .*]",
        )
    ]


def test_a_line_break_does_not_match_a_dot() -> None:
    # GIVEN a hyperparameter value with a line break (HyperParameterValue's pattern is .*)
    request = copy.deepcopy(TRAINING_JOB)
    request["HyperParameters"] = {"classes": "daisy\nrose"}
    # WHEN CreateTrainingJob is checked
    error = _refusal("sagemaker", "CreateTrainingJob", request)
    # THEN it is refused: Java's '.' stops at line terminators
    assert error.message == (
        "1 validation error detected: Value '{classes=daisy\nrose}' at 'hyperParameters' failed to satisfy "
        "constraint: Map value must satisfy constraint: [Member must have length less than or equal to "
        "2500, Member must have length greater than or equal to 0, Member must satisfy regular expression "
        "pattern: .*]"
    )


def test_a_java_posix_class_is_ascii_only() -> None:
    # GIVEN a DynamoDB auto scaling policy name with a non-ASCII letter (pattern \p{Print}+, ASCII in Java)
    model = botocore.session.get_session().get_service_model("dynamodb")
    assert model.shape_for("AutoScalingPolicyName").metadata["pattern"] == "\\p{Print}+"
    update = {"TargetTrackingScalingPolicyConfiguration": {"TargetValue": 70.0}, "PolicyName": "café"}
    settings = {"MinimumUnits": 1, "MaximumUnits": 10, "ScalingPolicyUpdate": update}
    request = {"TableName": "runs", "ProvisionedWriteCapacityAutoScalingUpdate": settings}
    # WHEN UpdateTableReplicaAutoScaling is checked
    found = violations("dynamodb", "UpdateTableReplicaAutoScaling", request)
    # THEN the name is refused
    assert [violation.path for violation in found] == [
        "provisionedWriteCapacityAutoScalingUpdate.scalingPolicyUpdate.policyName"
    ]


def test_a_sensitive_map_is_not_shown() -> None:
    # GIVEN Lambda environment variables (a sensitive map) with a key its pattern refuses
    request = {"FunctionName": "retrain-f", "Environment": {"Variables": {"1TOKEN": "hunter2"}}}
    # WHEN UpdateFunctionConfiguration is checked
    error = _refusal("lambda", "UpdateFunctionConfiguration", request)
    # THEN neither the key nor the secret appears
    assert error.message == (
        "1 validation error detected: Value at 'environment.variables' failed to satisfy constraint: "
        "Map keys must satisfy constraint: [Member must satisfy regular expression pattern: "
        "[a-zA-Z]([a-zA-Z0-9_])+]"
    )
    assert "hunter2" not in repr(error.violations)


def test_a_java_word_class_is_ascii_only() -> None:
    # GIVEN an IAM role name with a non-ASCII letter (pattern [\w+=,.@-]+; Java's \w is ASCII)
    # WHEN GetRole is checked
    found = violations("iam", "GetRole", {"RoleName": "rolé"})
    # THEN it is refused, where Python's Unicode \w would have let it through
    assert found == [
        Violation("roleName", "Member must satisfy regular expression pattern: [\\w+=,.@-]+", "rolé")
    ]


@pytest.mark.parametrize(
    "when", [datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC), 1704067200, "2024-01-01T00:00:00Z"]
)
def test_a_timestamp_may_be_a_datetime_an_epoch_or_an_iso_string(when: object) -> None:
    # GIVEN a timestamp in one of the forms botocore serializes
    # WHEN ListTrainingJobs is checked
    # THEN it is accepted
    assert violations("sagemaker", "ListTrainingJobs", {"CreationTimeAfter": when}) == []


def test_a_timestamp_that_does_not_parse_is_refused() -> None:
    # GIVEN a timestamp string that is no date
    # WHEN ListTrainingJobs is checked
    found = violations("sagemaker", "ListTrainingJobs", {"CreationTimeAfter": "yesterday"})
    # THEN its type is refused
    assert found == [Violation("creationTimeAfter", "Member must be of type timestamp", "yesterday")]


def test_an_over_long_s3_key_is_key_too_long() -> None:
    # GIVEN an object key of 1025 bytes (S3 allows 1024; botocore's model gives no maximum)
    request = {"Bucket": "retrain-data", "Key": "k" * 1025, "Body": b"{}"}
    # WHEN PutObject is checked
    error = _refusal("s3", "PutObject", request)
    # THEN S3's own code and message answer
    assert (error.code, error.message) == ("KeyTooLongError", "Your key is too long")
    assert error.violations[0].path == "key"


def test_an_s3_key_is_measured_in_utf8_bytes() -> None:
    # GIVEN a key of 513 characters but 1026 UTF-8 bytes
    request = {"Bucket": "retrain-data", "Key": "é" * 513}
    # WHEN GetObject is checked
    error = _refusal("s3", "GetObject", request)
    # THEN it is too long
    assert error.code == "KeyTooLongError"


def test_a_1024_byte_s3_key_passes() -> None:
    # GIVEN an object key of exactly 1024 bytes
    request = {"Bucket": "retrain-data", "Key": "k" * 1024, "Body": b"{}"}
    # WHEN PutObject is checked
    # THEN nothing is refused
    assert violations("s3", "PutObject", request) == []


@pytest.mark.parametrize(
    ("service", "operation", "params", "code"),
    [
        ("s3", "GetObject", {"Bucket": "retrain-data", "Key": ""}, "InvalidArgument"),
        ("sns", "Publish", {"TopicArn": "arn:aws:sns:us-east-1:123456789012:retrain"}, "InvalidParameter"),
        (
            "sqs",
            "SendMessage",
            {"QueueUrl": "https://sqs.us-east-1.amazonaws.com/1/q"},
            "InvalidParameterValue",
        ),
        ("sts", "AssumeRole", {"RoleArn": ROLE_ARN, "RoleSessionName": "a b"}, "ValidationError"),
        ("iam", "GetRole", {"RoleName": ""}, "ValidationError"),
        ("cloudformation", "DescribeStacks", {"NextToken": ""}, "ValidationError"),
        (
            "dynamodb",
            "GetItem",
            {"TableName": "runs", "Key": {}, "ReturnConsumedCapacity": "ALL"},
            "ValidationException",
        ),
    ],
)
def test_each_service_answers_with_its_own_error_code(
    service: str, operation: str, params: dict[str, Any], code: str
) -> None:
    # GIVEN a request that breaks one of its service's constraints
    # WHEN it is checked
    error = _refusal(service, operation, params)
    # THEN the service's code for a constraint violation is used
    assert error.code == code


def test_the_boto3_method_name_is_accepted() -> None:
    # GIVEN the snake_case name boto3 gives CreateModelPackageGroup
    # WHEN it is checked under that name
    found = violations("sagemaker", "create_model_package_group", {"ModelPackageGroupName": "a_b"})
    # THEN the same operation's contract applies
    assert [violation.path for violation in found] == ["modelPackageGroupName"]


def test_an_unknown_operation_is_a_programming_error() -> None:
    # GIVEN an operation SageMaker lacks
    # WHEN it is checked
    # THEN ValueError says so
    with pytest.raises(ValueError, match="CreateTrainingJobs"):
        check("sagemaker", "CreateTrainingJobs", {})


def test_a_contract_error_survives_pickling() -> None:
    # GIVEN a refusal
    error = _refusal("sagemaker", "CreateModelPackageGroup", {"ModelPackageGroupName": "a_b"})
    # WHEN it crosses a process boundary
    copied = pickle.loads(pickle.dumps(error))
    # THEN its code, message and violations come along
    assert (copied.code, copied.message, copied.violations) == (error.code, error.message, error.violations)


@pytest.mark.parametrize(("service", "operation"), OPERATIONS)
def test_every_pattern_of_the_stacks_operations_is_checked(service: str, operation: str) -> None:
    # GIVEN an operation the embedded stack serves
    # WHEN every pattern its input reaches is compiled
    patterns = prepare(service, operation)
    # THEN none was left unchecked
    assert not patterns & UNCHECKED_PATTERNS
