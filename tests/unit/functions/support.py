"""moto-backed AWS for the control-plane tests: the resources the template makes, and event builders."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent
from moto import mock_aws

from retrain.dev import tables
from retrain.embedded.dynamodb import query_sort


@dataclass
class Aws:
    """Clients on one moto account, and the names of the resources the stack would hold."""

    s3: Any
    dynamodb: Any
    sfn: Any
    sagemaker: Any
    sns: Any
    data_bucket: str = "retrain-data"
    artifact_bucket: str = "retrain-artifacts"
    ledger_table: str = "retrain-ledger"
    runs_table: str = "retrain-runs"
    datasets_table: str = "retrain-datasets"
    state_machine_arn: str = ""
    topic_arn: str = ""


def create_tables(dynamodb: Any, aws: Aws) -> None:
    tables.create_tables(dynamodb, ledger=aws.ledger_table, runs=aws.runs_table, datasets=aws.datasets_table)


def moto_aws(config: dict[str, Any] | None = None) -> Iterator[Aws]:
    """Start moto (with `config`) and make the resources; yields the clients. moto's DynamoDB sorts by
    plain key values, as in the embedded stack (the same pages, a fraction of the time)."""
    with mock_aws(config=config) if config else mock_aws(), query_sort.installed():
        region = "us-east-1"
        aws = Aws(
            s3=boto3.client("s3", region_name=region),
            dynamodb=boto3.client("dynamodb", region_name=region),
            sfn=boto3.client("stepfunctions", region_name=region),
            sagemaker=boto3.client("sagemaker", region_name=region),
            sns=boto3.client("sns", region_name=region),
        )
        aws.s3.create_bucket(Bucket=aws.data_bucket)
        aws.s3.create_bucket(Bucket=aws.artifact_bucket)
        # as template.yaml's ArtifactBucket
        aws.s3.put_bucket_versioning(
            Bucket=aws.artifact_bucket, VersioningConfiguration={"Status": "Enabled"}
        )
        create_tables(aws.dynamodb, aws)
        aws.topic_arn = aws.sns.create_topic(Name="retrain-notifications")["TopicArn"]
        role = boto3.client("iam", region_name=region).create_role(
            RoleName="retrain-states", AssumeRolePolicyDocument="{}"
        )["Role"]["Arn"]
        aws.state_machine_arn = aws.sfn.create_state_machine(
            name="retrain-training",
            definition='{"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}',
            roleArn=role,
        )["stateMachineArn"]
        yield aws


def function_environment(aws: Aws, function: str) -> dict[str, str]:
    """`function`'s environment as template.yaml sets it (parameters at their defaults), naming this moto
    account's buckets, tables, topic and state machine."""
    from controller import names
    from retrain.dev.template_model import default_environment

    return {
        **default_environment(function),
        names.ENV_DATA_BUCKET: aws.data_bucket,
        names.ENV_ARTIFACT_BUCKET: aws.artifact_bucket,
        names.ENV_LEDGER_TABLE: aws.ledger_table,
        names.ENV_RUNS_TABLE: aws.runs_table,
        names.ENV_DATASETS_TABLE: aws.datasets_table,
        names.ENV_STATE_MACHINE_ARN: aws.state_machine_arn,
        names.ENV_TOPIC_ARN: aws.topic_arn,
    }


def template_settings() -> dict[str, Any]:
    """RUN_SETTINGS as the template renders them with its defaults, with a VPC (the template leaves it to
    the deployer) and MinImagesPerLabel 1 (the tests freeze a handful of images; the per-label minimum
    has tests of its own)."""
    import json

    from controller import names
    from retrain.dev.template_model import default_environment

    rendered = json.loads(default_environment("PrepareRunFunction")[names.ENV_SETTINGS])
    return {**rendered, "subnets": "subnet-1", "security_groups": "sg-1", "min_images_per_label": 1}


def make_config(aws: Aws, **policy: int) -> Any:
    """The Lambdas' Config as template.yaml sets it with its defaults (and `template_settings`), on this
    moto account's resources."""
    import json

    from controller import names
    from controller.config import DispatchPolicy, from_environ

    environment = function_environment(aws, "PrepareRunFunction")
    settings = template_settings()
    config = from_environ(
        {
            **environment,
            names.ENV_SAGEMAKER_ROLE_ARN: "arn:aws:iam::123456789012:role/retrain-sagemaker",
            names.ENV_SETTINGS: json.dumps(settings),
        }
    )
    return dataclasses.replace(
        config, policy=DispatchPolicy(**{**dataclasses.asdict(config.policy), **policy})
    )


def sqs_event(bodies: list[str]) -> dict[str, Any]:
    """An SQS event as Lambda receives it, one record per body."""
    return {
        "Records": [
            {
                "messageId": f"m-{i}",
                "receiptHandle": f"r-{i}",
                "body": body,
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1767261600000"},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:retrain-ingest",
                "awsRegion": "us-east-1",
            }
            for i, body in enumerate(bodies)
        ]
    }


def object_created(
    events_dir: Any,
    key: str,
    *,
    size: int = 2048,
    sequencer: str = "0062E99A88DC407460",
    time: str = "2026-01-01T10:00:00Z",
    etag: str | None = None,
    version_id: str = "v1",
) -> str:
    """The EventBridge fixture with one object's fields replaced, as an SQS body. Unless `etag` is given,
    each key has bytes of its own (ingest refuses the same bytes under a second key)."""
    import hashlib
    import json

    if etag is None:
        etag = hashlib.md5(key.encode(), usedforsecurity=False).hexdigest()

    event = json.loads((events_dir / "eventbridge_object_created.json").read_text())
    event["time"] = time
    event["detail"]["object"].update({"key": key, "size": size, "sequencer": sequencer, "etag": etag})
    if version_id:
        event["detail"]["object"]["version-id"] = version_id
    else:  # an unversioned bucket's events carry no version
        del event["detail"]["object"]["version-id"]
    return json.dumps(event)


def freeze_run(aws: Aws, config: Any, state: dict[str, Any], work_dir: Any) -> dict[str, Any]:
    """The two states after Prepare, as the state machine runs them: the freezing job's program
    (training_image/retrain_training/freeze.py, on this moto) with its outputs uploaded where the
    processing job's outputs go, then "Read the frozen manifest". Returns the state after them."""
    from pathlib import Path

    from controller import frozen
    from retrain_training import freeze

    run = state["run"]
    spec = run["container"]["freeze"]
    outputs = {spec["manifest_dir"]: run["manifest_s3_uri"], spec["frozen_dir"]: run["frozen_s3_uri"]}
    local = {path: Path(work_dir) / run["run_id"] / Path(path).name for path in outputs}
    slept: list[float] = []
    code = freeze.main(
        [
            *run["freeze_arguments"],
            "--manifest-dir",
            str(local[spec["manifest_dir"]]),
            "--frozen-dir",
            str(local[spec["frozen_dir"]]),
        ],
        client=aws.dynamodb,
        sleep=slept.append,  # the fence: no test waits for it
    )
    assert code == 0, "the freezing job failed"
    for path, uri in outputs.items():
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        for file in sorted(f for f in local[path].rglob("*") if f.is_file()):
            key = prefix + file.relative_to(local[path]).as_posix()
            aws.s3.put_object(Bucket=bucket, Key=key, Body=file.read_bytes())
    return dict(frozen.read_frozen(state, config=config, dynamodb=aws.dynamodb, s3=aws.s3))


EVENTS = Path(__file__).resolve().parents[2] / "events"


def training_job_ended(job: str, status: str = "Completed", *, dataset: str, run_id: str) -> EventBridgeEvent:
    """A training job `job` of `dataset`'s run `run_id` that reached `status`, as SageMaker sends its state
    change (the job's tags name its run)."""
    from controller import names

    return EventBridgeEvent(
        {
            "source": "aws.sagemaker",
            "detail-type": "SageMaker Training Job State Change",
            "detail": {
                "TrainingJobName": job,
                "TrainingJobStatus": status,
                "Tags": {names.TAG_DATASET: dataset, names.TAG_RUN_ID: run_id},
            },
        }
    )


def processing_job_ended(
    aws: Aws, name: str, status: str, tags: dict[str, str] | None = None
) -> dict[str, Any]:
    """A Processing job `name` that ended in `status`, as SageMaker sends its state change: the fields of
    AWS's documented sample (tests/events/sagemaker_processing_job_state_change.json), no tags. With
    `tags`, the job is created (tagged) on the moto account first, as the function's ListTags reads it."""
    event = json.loads((EVENTS / "sagemaker_processing_job_state_change.json").read_text(encoding="utf-8"))
    arn = f"arn:aws:sagemaker:us-east-1:123456789012:processing-job/{name}"
    if tags is not None:
        arn = aws.sagemaker.create_processing_job(
            ProcessingJobName=name,
            ProcessingResources={
                "ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.large", "VolumeSizeInGB": 30}
            },
            AppSpecification={"ImageUri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/retrain:latest"},
            RoleArn="arn:aws:iam::123456789012:role/retrain-sagemaker",
            Tags=[{"Key": key, "Value": value} for key, value in tags.items()],
        )["ProcessingJobArn"]
    event["resources"] = [arn]
    event["detail"].update(ProcessingJobName=name, ProcessingJobArn=arn, ProcessingJobStatus=status)
    return dict(event)
