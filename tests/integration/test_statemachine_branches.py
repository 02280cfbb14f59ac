"""Every branch of statemachine/training.asl.json, executed by moto's ASL interpreter.

The Lambda steps are this project's functions (run in-process by the installed invoker); SageMaker and
FSx are answered at the service boundary by scripted doubles (their jobs "run" by writing the output files
the real containers write), through retrain.embedded.stepfunctions.integrations.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import json
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from controller import (
    arrivals,
    best_candidate,
    datasets,
    finalize,
    frozen,
    gate,
    import_report,
    ledger,
    names,
    prepare,
    record_failure,
    register,
    runs,
)
from controller.config import Config
from retrain.embedded.account import ACCOUNT_ID
from retrain.embedded.gatekeeper import contracts
from retrain.embedded.stepfunctions.integrations import installed
from retrain_contract import container
from tests.unit.functions.support import (
    Aws,
    make_config,
    moto_aws,
    object_created,
    sqs_event,
    template_settings,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ASL = REPO / "statemachine" / "training.asl.json"
ACCOUNT = ACCOUNT_ID
FUNCTIONS = (
    "PrepareRunFunction",
    "ReadFrozenManifestFunction",
    "ReadArrivalsFunction",
    "ImportReportFunction",
    "PickBestCandidateFunction",
    "GateFunction",
    "RegisterModelFunction",
    "FinalizeRunFunction",
    "RecordFailureFunction",
)
RULE_ACCOUNT = "503895931360"
EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def client_error(code: str, message: str, operation: str) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": 400}}, operation
    )


@dataclass
class Script:
    """What the scripted services answer: accuracies, rule verdicts, failures."""

    challenger_top1: float = 0.9
    champion_top1: float = 0.8
    rule_status: str = "NoIssuesFound"
    rule_name: str = "LossNotDecreasing"  # the rule rule_status is the verdict of
    final_training: str = "Completed"
    throttle_tuning: int = 0
    import_lifecycle: str = "SUCCEEDED"
    refuse_tuning: str = ""  # an error code SageMaker answers every CreateHyperParameterTuningJob with
    tuning_attempts: int = 0
    rules_pending_describes: int = 0  # describes that still show managed rules InProgress
    record_failure_breaks: bool = False
    # the champion on the new uploads: its top-1 there and on its validation images, the paths it suspects
    arrivals_top1: float = 0.9
    arrivals_validation_top1: float = 0.9
    arrivals_suspects: tuple[str, ...] = ()
    arrivals_status: str = "Completed"
    arrivals_pending_describes: int = 0  # describes that still show the job InProgress
    refuse_arrivals: str = ""  # an error code SageMaker answers the arrivals job's creation with


@dataclass
class ScriptedSageMaker:
    """SageMaker at the service boundary: jobs complete after one describe and leave their outputs in S3."""

    s3: Any
    script: Script
    dynamodb: Any = None
    requests: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)  # the kinds of job requests, in the order made

    def _freeze(self, request: dict[str, Any]) -> None:
        """The freezing job's program itself (it reads this moto's ledger), its outputs put where the
        job's outputs go."""
        from retrain_training import freeze

        with tempfile.TemporaryDirectory() as work:
            local = {o["S3Output"]["LocalPath"]: Path(work) / o["OutputName"] for o in
                     request["ProcessingOutputConfig"]["Outputs"]}  # fmt: skip
            arguments = [
                *request["AppSpecification"]["ContainerArguments"],
                *("--manifest-dir", str(local[container.FREEZE_MANIFEST_DIR])),
                *("--frozen-dir", str(local[container.FREEZE_FROZEN_DIR])),
            ]
            assert freeze.main(arguments, client=self.dynamodb, sleep=lambda _: None) == 0
            for output in request["ProcessingOutputConfig"]["Outputs"]:
                uri = output["S3Output"]["S3Uri"].rstrip("/")
                root = local[output["S3Output"]["LocalPath"]]
                for file in (f for f in root.rglob("*") if f.is_file()):
                    relative = file.relative_to(root).as_posix()
                    bucket, _, key = f"{uri}/{relative}"[len("s3://") :].partition("/")
                    self.s3.put_object(Bucket=bucket, Key=key, Body=file.read_bytes())

    def _record(self, kind: str, request: dict[str, Any]) -> None:
        self.requests.setdefault(kind, []).append(request)
        self.order.append(kind)

    def _read(self, uri: str) -> bytes:
        bucket, _, key = uri[len("s3://") :].partition("/")
        return bytes(self.s3.get_object(Bucket=bucket, Key=key)["Body"].read())

    def _arrivals(self, request: dict[str, Any]) -> None:
        """The champion on the new uploads: the scripted figures over the lines the freeze chose, and
        under hold the run's manifest without the scripted suspects."""
        inputs = {i["InputName"]: i["S3Input"]["S3Uri"] for i in request["ProcessingInputs"]}
        outputs = {
            o["OutputName"]: o["S3Output"]["S3Uri"] for o in request["ProcessingOutputConfig"]["Outputs"]
        }
        lines = [json.loads(line) for line in self._read(
            inputs[container.CHANNEL_MANIFEST] + container.MANIFEST_FILE).decode().splitlines()]  # fmt: skip
        new = [line for line in lines if line[container.MANIFEST_SPLIT_KEY] == container.SPLIT_NEW]
        validation = len(lines) - len(new)
        suspects = [path for path in self.script.arrivals_suspects if any(
            line[container.MANIFEST_PATH_KEY] == path for line in new)]  # fmt: skip
        top1, reference = self.script.arrivals_top1, self.script.arrivals_validation_top1
        held = 0
        arguments = request["AppSpecification"]["ContainerArguments"]
        if "--hold-manifest" in arguments:
            manifest = self._read(inputs[container.ARRIVALS_RUN_MANIFEST_INPUT] + container.MANIFEST_FILE)
            kept = [line for line in manifest.decode().splitlines(keepends=True)
                    if json.loads(line)[container.MANIFEST_PATH_KEY] not in suspects]  # fmt: skip
            held = len(manifest.decode().splitlines()) - len(kept)
            bucket, _, key = (outputs[container.ARRIVALS_HELD_OUTPUT] + container.MANIFEST_FILE)[
                5:
            ].partition("/")
            self.s3.put_object(Bucket=bucket, Key=key, Body="".join(kept).encode())
        figures = {
            "samples": len(new),
            "top1": top1,
            "top1_interval": [top1 - 0.01, min(1.0, top1 + 0.01)],
            "top3": 1.0,
            "per_class": {"daisy": {"recall": top1, "support": len(new)}},
        }
        self._put(outputs[container.EVALUATION_OUTPUT] + container.ARRIVALS_FILE, {
            "new": figures,
            "validation": {"samples": validation, "top1": reference, "top1_interval": [reference - 0.05,
                           min(1.0, reference + 0.05)], "top3": 1.0} if validation else None,
            "drift": reference - top1 if validation else None,
            "suspects": {"images_checked": len(new), "suspect_count": len(suspects), "per_label": {}},
            "held": held,
            "labels_the_model_lacks": [],
        })  # fmt: skip

    def _put(self, uri: str, body: Any) -> None:
        bucket, _, key = uri[len("s3://") :].partition("/")
        self.s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(body).encode())

    def _model(self, uri: str) -> str:
        """A job's model.tar.gz where SageMaker leaves it (a later run starts from the champion's)."""
        self._put(uri, {"weights": uri})
        return uri

    def create_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]:
        self.script.tuning_attempts += 1
        if self.script.refuse_tuning:
            raise client_error(
                self.script.refuse_tuning,
                "1 validation error detected: Value 'x' at 'hyperParameterTuningJobName' failed to satisfy "
                "constraint: Member must have length less than or equal to 32",
                "CreateHyperParameterTuningJob",
            )
        if self.script.throttle_tuning > 0:
            self.script.throttle_tuning -= 1
            raise client_error("ThrottlingException", "Rate exceeded", "CreateHyperParameterTuningJob")
        self._record("tuning", request)
        name = request["HyperParameterTuningJobName"]
        output = request["TrainingJobDefinition"]["OutputDataConfig"]["S3OutputPath"]
        trials = []
        for i, lr in enumerate(("0.01", "0.05")):
            trial = f"{name}-{i + 1:03d}-abcd"
            trials.append(trial)
            self.jobs[trial] = {
                "TrainingJobName": trial,
                "TrainingJobStatus": "Completed",
                "HyperParameters": {**request["TrainingJobDefinition"]["StaticHyperParameters"], "lr": lr},
                "ModelArtifacts": {"S3ModelArtifacts": self._model(f"{output}{trial}/output/model.tar.gz")},
                "TrainingTimeInSeconds": 100,
                "BillableTimeInSeconds": 30,
                "CreationTime": EPOCH,
            }
        ranges = request["HyperParameterTuningJobConfig"]["ParameterRanges"]
        self.jobs[name] = {"trials": trials, "best": trials[1], "ranges": ranges}
        return {
            "HyperParameterTuningJobArn": f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:"
            f"hyper-parameter-tuning-job/{name}"
        }

    def describe_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]:
        name = request["HyperParameterTuningJobName"]
        best = self.jobs[name]["best"]
        # the best trial's value of every tuned hyperparameter: these three, and each other range's Max
        tuned = {
            r["Name"]: r["MaxValue"]
            for kind in ("ContinuousParameterRanges", "IntegerParameterRanges")
            for r in self.jobs[name]["ranges"].get(kind, [])
        }
        tuned.update({"lr": "0.05", "optimizer": '"adamw"', "weight-decay": "0.0001"})
        trials = len(self.jobs[name]["trials"])
        counters = {
            "Completed": trials,
            "InProgress": 0,
            "RetryableError": 0,
            "NonRetryableError": 0,
            "Stopped": 0,
        }
        return {
            "HyperParameterTuningJobName": name,
            "HyperParameterTuningJobStatus": "Completed",
            "CreationTime": EPOCH,
            "TrainingJobStatusCounters": counters,
            "BestTrainingJob": {
                "TrainingJobName": best,
                "TunedHyperParameters": tuned,
                "FinalHyperParameterTuningJobObjectiveMetric": {"MetricName": "val-accuracy", "Value": 0.91},
                "TrainingJobStatus": "Completed",
                "CreationTime": EPOCH,
            },
        }

    def list_training_jobs_for_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]:
        trials = self.jobs[request["HyperParameterTuningJobName"]]["trials"]
        return {
            "TrainingJobSummaries": [{"TrainingJobName": t, "TrainingJobStatus": "Completed"} for t in trials]
        }

    def create_training_job(self, **request: Any) -> dict[str, Any]:
        self._record("training", request)
        name = request["TrainingJobName"]
        failed = self.script.final_training == "Failed"
        self.jobs[name] = {
            "TrainingJobName": name,
            "TrainingJobStatus": self.script.final_training,
            "HyperParameters": request["HyperParameters"],
            "ModelArtifacts": {
                "S3ModelArtifacts": self._model(
                    f"{request['OutputDataConfig']['S3OutputPath']}{name}/output/model.tar.gz"
                )
            },
            "TrainingTimeInSeconds": 200,
            "BillableTimeInSeconds": 60,
            "CreationTime": EPOCH,
            **({"FailureReason": "AlgorithmError: loss became NaN at step 40"} if failed else {}),
        }
        if "DebugRuleConfigurations" in request:
            self.jobs[name]["DebugRuleEvaluationStatuses"] = [
                {
                    "RuleConfigurationName": rule["RuleConfigurationName"],
                    "RuleEvaluationStatus": self.script.rule_status
                    if rule["RuleConfigurationName"] == self.script.rule_name
                    else "NoIssuesFound",
                }
                for rule in request["DebugRuleConfigurations"]
            ]
        return {"TrainingJobArn": f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:training-job/{name}"}

    def describe_training_job(self, **request: Any) -> dict[str, Any]:
        name = request["TrainingJobName"]
        if name not in self.jobs:
            raise client_error(
                "ValidationException", f"Requested resource not found: {name}", "DescribeTrainingJob"
            )
        job = dict(self.jobs[name])
        if "DebugRuleEvaluationStatuses" in job and self.script.rules_pending_describes > 0:
            self.script.rules_pending_describes -= 1
            job["DebugRuleEvaluationStatuses"] = [
                {**status, "RuleEvaluationStatus": "InProgress"}
                for status in job["DebugRuleEvaluationStatuses"]
            ]
        return job

    def create_processing_job(self, **request: Any) -> dict[str, Any]:
        entry = request["AppSpecification"]["ContainerEntrypoint"][-1]
        freezing = entry.endswith(container.FREEZE_PROGRAM)
        name = request["ProcessingJobName"]
        arriving = name.endswith("eval-arrivals")
        if arriving and self.script.refuse_arrivals:
            limit = "The account-level service limit 'ml.m5.xlarge for processing job usage' is 0 Instances"
            raise client_error(self.script.refuse_arrivals, limit, "CreateProcessingJob")
        self._record("freeze" if freezing else "arrivals" if arriving else "processing", request)
        output = request["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"].rstrip("/")
        if freezing:
            self._freeze(request)
        elif arriving:
            if self.script.arrivals_status == "Completed":
                self._arrivals(request)
        elif entry.endswith("rule_check.py"):
            self._put(
                f"{output}/rule_results.json",
                [
                    {
                        "rule": "LossNotDecreasing",
                        "status": self.script.rule_status,
                        "step": 40,
                        "detail": "",
                    },
                    {"rule": "VanishingGradient", "status": "NoIssuesFound", "step": 40, "detail": ""},
                ],
            )
        else:
            top1 = self.script.champion_top1 if name.endswith("champion") else self.script.challenger_top1
            self._put(f"{output}/evaluation.json", {"top1": top1, "top3": 1.0, "labels": ["a", "b"]})
        self.jobs[name] = {
            "ProcessingJobName": name,
            "ProcessingJobStatus": "Completed"
            if not name.endswith("eval-arrivals")
            else self.script.arrivals_status,
            "CreationTime": EPOCH,
        }
        return {"ProcessingJobArn": f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:processing-job/{name}"}

    def describe_processing_job(self, **request: Any) -> dict[str, Any]:
        job = dict(self.jobs[request["ProcessingJobName"]])
        if job["ProcessingJobName"].endswith("eval-arrivals"):
            self.order.append("describe arrivals")
            if self.script.arrivals_pending_describes > 0:
                self.script.arrivals_pending_describes -= 1
                job["ProcessingJobStatus"] = "InProgress"
        return job


@dataclass
class ScriptedFsx:
    """FSx at the service boundary: a task runs for one describe, then ends as scripted."""

    s3: Any
    script: Script
    requests: list[dict[str, Any]] = field(default_factory=list)
    describes: int = 0

    def create_data_repository_task(self, **request: Any) -> dict[str, Any]:
        self.requests.append(request)
        return {"DataRepositoryTask": {"TaskId": "task-0123456789abcdef0", "Lifecycle": "PENDING"}}

    def describe_data_repository_tasks(self, **request: Any) -> dict[str, Any]:
        self.describes += 1
        report = self.requests[-1]["Report"]
        task: dict[str, Any] = {
            "TaskId": "task-0123456789abcdef0",
            "Lifecycle": "EXECUTING" if self.describes == 1 else self.script.import_lifecycle,
            "Type": "IMPORT_METADATA_FROM_REPOSITORY",
            "FileSystemId": self.requests[-1]["FileSystemId"],
            "Report": report,
            "Status": {"TotalCount": 4, "SucceededCount": 3, "FailedCount": 1},
        }
        if task["Lifecycle"] == "FAILED":
            task["FailureDetails"] = {"Message": "1 file could not be imported"}
            bucket, _, prefix = report["Path"][len("s3://") :].partition("/")
            self.s3.put_object(
                Bucket=bucket,
                Key=f"{prefix}/task-0123456789abcdef0/failures.csv",
                Body=b"data/flowers/daisy/a.jpg,FAILED,Access denied\n",
            )
        return {"DataRepositoryTasks": [task]}

    def describe_file_systems(self, **request: Any) -> dict[str, Any]:
        return {"FileSystems": []}

    def mount_path(self, file_system_id: str, directory_path: str) -> Path:
        raise NotImplementedError("no job mounts the file system in these tests")


def _zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("index.py", "def handler(event, context):\n    return event\n")
    return buffer.getvalue()


@dataclass
class Harness:
    aws: Aws
    config: Config
    sagemaker: ScriptedSageMaker
    fsx: ScriptedFsx
    script: Script
    state_machine_arn: str

    def invoke(self, function_name: str, payload: dict[str, Any]) -> Any:
        """The Lambda runtime: the handler's plain function with moto clients and the scripted SageMaker."""
        handler = self._handlers().get(function_name)
        if handler is None:
            raise AssertionError(f"unexpected function {function_name}")
        return handler(payload)

    def _handlers(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        """Each Lambda function of the template, by its logical id, as a call of its plain function."""
        a, c, scripted = self.aws, self.config, self.sagemaker
        return {
            "PrepareRunFunction": lambda p: prepare.prepare(p, config=c, dynamodb=a.dynamodb, s3=a.s3),
            "ReadFrozenManifestFunction": lambda p: frozen.read_frozen(
                p, config=c, dynamodb=a.dynamodb, s3=a.s3
            ),
            "ReadArrivalsFunction": lambda p: arrivals.read_arrivals(
                p, config=c, dynamodb=a.dynamodb, s3=a.s3
            ),
            "ImportReportFunction": lambda p: import_report.read_report(p, s3=a.s3),
            "PickBestCandidateFunction": lambda p: best_candidate.pick(
                p,
                config=c,
                dynamodb=a.dynamodb,
                sagemaker=scripted,  # type: ignore[arg-type]
            ),
            "GateFunction": lambda p: gate.gate(
                p,
                config=c,
                dynamodb=a.dynamodb,
                s3=a.s3,
                sagemaker=scripted,  # type: ignore[arg-type]
            ),
            "RegisterModelFunction": lambda p: register.register(
                p, config=c, dynamodb=a.dynamodb, sagemaker=a.sagemaker
            ),
            "FinalizeRunFunction": lambda p: finalize.finalize(
                p,
                config=c,
                dynamodb=a.dynamodb,
                sagemaker=scripted,  # type: ignore[arg-type]
                sfn=None,
            ),
            "RecordFailureFunction": self._record_failure,
        }

    def _record_failure(self, payload: dict[str, Any]) -> Any:
        if self.script.record_failure_breaks:
            raise RuntimeError("the run table is unreachable")
        return record_failure.record_failure(payload, config=self.config, dynamodb=self.aws.dynamodb)

    def upload(self, *keys: str) -> None:
        bodies = [
            object_created(REPO / "tests" / "events", key, sequencer=f"{i + 1:018X}")
            for i, key in enumerate(keys)
        ]
        from controller import ingest

        ingest.ingest(sqs_event(bodies), config=self.config, dynamodb=self.aws.dynamodb)

    def run(
        self, run_input: dict[str, Any], name: str = "flowers-00001", timeout: float = 60
    ) -> dict[str, Any]:
        execution = self.aws.sfn.start_execution(
            stateMachineArn=self.state_machine_arn, name=name, input=json.dumps(run_input)
        )["executionArn"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            described: dict[str, Any] = self.aws.sfn.describe_execution(executionArn=execution)
            if described["status"] != "RUNNING":
                return described
            time.sleep(0.1)
        raise AssertionError(f"the execution did not finish within {timeout} s")

    def notifications(self) -> list[dict[str, Any]]:
        """What the topic published (an SQS subscriber, raw SNS envelopes)."""
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.get_queue_url(QueueName="notifications")["QueueUrl"]
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        return [json.loads(m["Body"]) for m in messages]

    def record(self, run_id: str = "flowers-00001") -> runs.RunRecord:
        got = runs.get_run("flowers", run_id, table_name=self.aws.runs_table, client=self.aws.dynamodb)
        assert got is not None
        return got

    def lock(self) -> Any:
        return datasets.get("flowers", table_name=self.aws.datasets_table, client=self.aws.dynamodb).get(
            names.LOCK_ATTRIBUTE
        )


# The template's run settings with these changes: a small, fast run on FSx with a few quick import polls.
SETTINGS = {
    **template_settings(),
    "training_image": f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/retrain:latest",
    "instance_type": "ml.g5.xlarge",
    "instance_count": 1,
    "evaluation_instance_type": "ml.m5.xlarge",
    "epochs": 2,
    "spot": True,
    "max_runtime_seconds": 600,
    "max_wait_seconds": 1200,
    "final_training": True,
    "max_jobs": 2,
    "parallel_jobs": 1,
    "data_source": "fsx",
    "file_system_id": "fs-0123456789abcdef0",
    "file_system_mount_name": "abcdefgh",
    "subnets": "subnet-1",
    "security_groups": "sg-1",
    "import_poll_seconds": 0,
    "import_max_polls": 5,
    "debugger_mode": "open",
}


@pytest.fixture
def harness() -> Iterator[Harness]:
    for aws in moto_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        base = make_config(aws)
        config = Config(
            **{
                **base.__dict__,
                "settings": SETTINGS,
                "min_accuracy": 0.5,
                "min_improvement": 0.01,
            }
        )
        role = "arn:aws:iam::123456789012:role/retrain-states"
        lam = boto3.client("lambda", region_name="us-east-1")
        substitutions = {
            "SageMakerRoleArn": config.sagemaker_role_arn,
            "NotificationTopicArn": aws.topic_arn,
            "DebuggerRuleImage": f"{RULE_ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/sagemaker-debugger-rules",
            "SystemRulePatience": "1000",
        }
        for function in FUNCTIONS:
            arn = lam.create_function(
                FunctionName=function,
                Runtime="python3.13",
                Role=role,
                Handler="index.handler",
                Code={"ZipFile": _zip()},
            )["FunctionArn"]
            substitutions[f"{function}Arn"] = arn
        definition = ASL.read_text()
        for key, value in substitutions.items():
            definition = definition.replace("${" + key + "}", value)
        assert "${" not in definition, "the ASL names a substitution the template does not provide"
        arn = aws.sfn.create_state_machine(name="retrain-training-test", definition=definition, roleArn=role)[
            "stateMachineArn"
        ]
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue = sqs.create_queue(QueueName="notifications")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        aws.sns.subscribe(TopicArn=aws.topic_arn, Protocol="sqs", Endpoint=queue_arn)
        script = Script()
        h = Harness(
            aws,
            config,
            ScriptedSageMaker(aws.s3, script, aws.dynamodb),
            ScriptedFsx(aws.s3, script),
            script,
            arn,
        )
        h.upload(
            "data/flowers/daisy/a.jpg",
            "data/flowers/daisy/b.jpg",
            "data/flowers/tulip/c.png",
            "data/flowers/tulip/d.png",
        )
        with installed(lambda_invoker=h.invoke, sagemaker=h.sagemaker, fsx=h.fsx):
            yield h


def _pending(h: Harness) -> int:
    state = datasets.get("flowers", table_name=h.aws.datasets_table, client=h.aws.dynamodb)
    through = str(state.get(names.TRAINED_THROUGH, ""))
    return ledger.pending_stats(
        datasets.partitions_in("flowers", state),
        through,
        limit=10_000,
        table_name=h.aws.ledger_table,
        client=h.aws.dynamodb,
    ).count


def test_success_imports_tunes_trains_checks_evaluates_registers_and_finalizes(harness: Harness) -> None:
    # GIVEN four pending uploads of a data set with no champion
    # WHEN a run executes
    result = harness.run({"dataset": "flowers"})
    # THEN it succeeds and the run record tells the whole story
    assert result["status"] == "SUCCEEDED", result
    record = harness.record()
    assert record["status"] == "SUCCEEDED"
    assert record["gate"]["decision"] == "accepted"
    assert record["model_package_arn"].startswith("arn:aws:sagemaker:")
    assert record["manifest_size"] == 4 and record["new_images"] == 4
    assert record["best_hyperparameters"]["optimizer"] == "adamw"  # JSON-quoted tuned value unquoted
    assert (record["training_seconds"], record["billable_seconds"]) == (400, 120)
    assert record["spot_saving"] == pytest.approx(0.7)
    # AND the import covered the new label prefixes only, with a token and a report
    [task] = harness.fsx.requests
    assert task["Type"] == "IMPORT_METADATA_FROM_REPOSITORY"
    assert task["Paths"] == ["s3://retrain-data/data/flowers/daisy/", "s3://retrain-data/data/flowers/tulip/"]
    assert task["ClientRequestToken"].startswith("flowers-00001-") and len(task["ClientRequestToken"]) <= 63
    # AND FSx writes its report inside the file system's data repository (the data bucket's data/)
    assert task["Report"]["Enabled"] is True
    assert task["Report"]["Path"] == "s3://retrain-data/data/_fsx-reports/flowers/flowers-00001"
    assert record["import_task"] == "task-0123456789abcdef0"
    # AND tuning was Bayesian with early stopping, spot, checkpoints, FSx input, isolation, no warm start
    [tuning] = harness.sagemaker.requests["tuning"]
    config = tuning["HyperParameterTuningJobConfig"]
    assert (config["Strategy"], config["TrainingJobEarlyStoppingType"]) == ("Bayesian", "Auto")
    definition = tuning["TrainingJobDefinition"]
    assert definition["EnableManagedSpotTraining"] is True
    assert definition["StoppingCondition"] == {"MaxRuntimeInSeconds": 600, "MaxWaitTimeInSeconds": 1200}
    assert (
        definition["InputDataConfig"][0]["DataSource"]["FileSystemDataSource"]["DirectoryPath"]
        == "/abcdefgh/data/flowers"
    )
    assert definition["EnableNetworkIsolation"] and definition["EnableInterContainerTrafficEncryption"]
    assert "WarmStartConfig" not in tuning
    # AND the final training used the best hyperparameters
    [training] = harness.sagemaker.requests["training"]
    assert record["final_training_job"] == training["TrainingJobName"]
    assert training["HyperParameters"]["lr"] == "0.05" and training["HyperParameters"]["epochs"] == "2"
    # AND checkpoints to a prefix of its own, so it downloads none of the trials' checkpoints when it
    # starts, under the keys its trainer writes (LocalPath/<host>/ckpt-<step>.pt)
    trials_uri = definition["CheckpointConfig"]["S3Uri"]
    own = training["CheckpointConfig"]
    assert own["S3Uri"] == trials_uri + training["TrainingJobName"] + "/"
    trainer = container.resolve_paths(
        {container.JOB_NAME_ENV: training["TrainingJobName"]}
    ).job_checkpoint_dir
    key = own["S3Uri"].partition(f"s3://{harness.aws.artifact_bucket}/")[2] + str(
        (trainer / container.checkpoint_name(50)).relative_to(own["LocalPath"])
    )
    assert (match := names.CHECKPOINT_KEY_RE.match(key)) and match["job"] == training["TrainingJobName"]
    # AND the images are marked trained and the lock is released
    assert _pending(harness) == 0
    assert harness.lock() is None
    # AND one notification says so
    [notice] = harness.notifications()
    assert notice["Subject"] == "retrain flowers: model registered"
    assert record["model_package_arn"] in notice["Message"]


def test_a_second_run_warm_starts_from_the_last_tuning_job(harness: Harness) -> None:
    # GIVEN a first run that tuned
    assert harness.run({"dataset": "flowers"})["status"] == "SUCCEEDED"
    first_tuning = harness.record()["tuning_job"]
    # WHEN new images arrive and a second run executes
    harness.upload("data/flowers/rose/e.jpg")
    result = harness.run({"dataset": "flowers"}, name="flowers-00002")
    # THEN its tuning job warm-starts from the first one, and the new champion is challenged
    assert result["status"] == "SUCCEEDED", result
    second = harness.sagemaker.requests["tuning"][-1]
    assert second["WarmStartConfig"]["ParentHyperParameterTuningJobs"] == [
        {"HyperParameterTuningJobName": first_tuning}
    ]
    assert any(r["ProcessingJobName"].endswith("champion") for r in harness.sagemaker.requests["processing"])
    # AND, from the champion where the first run started from ImageNet, it has as many static plus
    # tunable hyperparameters as its parent: SageMaker refuses a warm start otherwise
    first = harness.sagemaker.requests["tuning"][0]
    assert harness.record("flowers-00002")["started_from"]["kind"] == "champion"
    assert first["TrainingJobDefinition"]["StaticHyperParameters"]["pretrained"] == "imagenet"
    assert _hyperparameter_count(second) == _hyperparameter_count(first)


def test_a_run_from_weights_tunes_the_fine_tuning_the_stack_gives_ranges_for(harness: Harness) -> None:
    # GIVEN a first run from scratch, and a stack that tunes the backbone's share of the learning rate
    # (0.05-0.5) and the epochs it stays frozen (0-2)
    assert harness.run({"dataset": "flowers"})["status"] == "SUCCEEDED"
    harness.config = dataclasses.replace(
        harness.config,
        settings={
            **SETTINGS,
            "backbone_lr_factor_min": 0.05,
            "backbone_lr_factor_max": 0.5,
            "freeze_backbone_epochs_min": 0,
            "freeze_backbone_epochs_max": 2,
        },
    )
    # WHEN new images arrive and a second run starts from the champion
    harness.upload("data/flowers/rose/e.jpg")
    assert harness.run({"dataset": "flowers"}, name="flowers-00002")["status"] == "SUCCEEDED"
    # THEN its tuning job tunes both (the share on a log scale), none of them also static ...
    second = harness.sagemaker.requests["tuning"][-1]
    ranges = second["HyperParameterTuningJobConfig"]["ParameterRanges"]
    assert {
        "Name": "backbone-lr-factor",
        "MinValue": "0.05",
        "MaxValue": "0.5",
        "ScalingType": "Logarithmic",
    } in (ranges["ContinuousParameterRanges"])
    assert ranges["IntegerParameterRanges"] == [
        {"Name": "freeze-backbone-epochs", "MinValue": "0", "MaxValue": "2", "ScalingType": "Linear"}
    ]
    static = second["TrainingJobDefinition"]["StaticHyperParameters"]
    assert "backbone-lr-factor" not in static and "freeze-backbone-epochs" not in static
    assert static["pretrained"] == "model.tar.gz"
    # ... as botocore's model of the operation admits (lengths, patterns, enums) ...
    contracts.check("sagemaker", "CreateHyperParameterTuningJob", second)
    # ... it warm-starts from the first run's job, where they were static, with as many of them
    assert _hyperparameter_count(second) == _hyperparameter_count(harness.sagemaker.requests["tuning"][0])
    # AND the final training job trains with the best trial's values
    final = harness.sagemaker.requests["training"][-1]["HyperParameters"]
    assert (final["backbone-lr-factor"], final["freeze-backbone-epochs"]) == ("0.5", "2")


def _hyperparameter_count(tuning: dict[str, Any]) -> int:
    ranges = tuning["HyperParameterTuningJobConfig"]["ParameterRanges"].values()
    return len(tuning["TrainingJobDefinition"]["StaticHyperParameters"]) + sum(map(len, ranges))


def test_gate_rejects_a_challenger_that_does_not_beat_the_champion(harness: Harness) -> None:
    # GIVEN a champion at 0.80 and a challenger that scores 0.805 (MinImprovement 0.01)
    harness.aws.s3.put_object(Bucket="retrain-artifacts", Key="old/model.tar.gz", Body=b"weights")
    harness.aws.dynamodb.put_item(
        TableName=harness.aws.datasets_table,
        Item=runs.serialize(
            {"dataset": "flowers", "champion": {"model_data": "s3://retrain-artifacts/old/model.tar.gz"}}
        ),
    )
    harness.script.challenger_top1 = 0.805
    # WHEN the run executes
    result = harness.run({"dataset": "flowers"})
    # THEN the execution completes, the run is REJECTED with the reason, and nothing is registered
    assert result["status"] == "SUCCEEDED", result
    record = harness.record()
    assert record["status"] == "REJECTED"
    assert "does not beat the champion's 0.8000" in record["gate"]["reason"]
    assert "model_package_arn" not in record
    assert record["champion"]["top1"] == 0.8
    assert harness.lock() is None and _pending(harness) == 0


def test_a_rule_that_found_issues_blocks_the_model(harness: Harness) -> None:
    # GIVEN rule_check.py reports LossNotDecreasing found issues
    harness.script.rule_status = "IssuesFound"
    # WHEN the run executes
    result = harness.run({"dataset": "flowers"})
    # THEN the run is rejected, blocked by that rule, and nothing is registered
    assert result["status"] == "SUCCEEDED", result
    record = harness.record()
    assert record["status"] == "REJECTED" and record["rules_blocked"] is True
    assert "LossNotDecreasing" in record["gate"]["reason"]
    assert "model_package_arn" not in record


def test_a_failed_import_fails_the_run_with_the_report_and_releases_the_lock(harness: Harness) -> None:
    # GIVEN the FSx import task fails, with a completion report listing a failed file
    harness.script.import_lifecycle = "FAILED"
    # WHEN the run executes
    result = harness.run({"dataset": "flowers"})
    # THEN it fails before any SageMaker job, the record quotes the report, the lock is free,
    # and the uploads are still pending for a later run
    assert result["status"] == "FAILED"
    record = harness.record()
    assert record["status"] == "FAILED"
    assert record["failure"]["error"] == "ImportFailedError"
    assert "Access denied" in record["failure"]["cause"]
    assert set(harness.sagemaker.requests) == {"freeze"}  # no job but the manifest's
    assert harness.lock() is None and _pending(harness) == 4


def test_a_failed_training_job_fails_the_run_with_its_reason(harness: Harness) -> None:
    # GIVEN the final training job fails
    harness.script.final_training = "Failed"
    # WHEN the run executes
    result = harness.run({"dataset": "flowers"})
    # THEN the run is FAILED with SageMaker's reason, the lock is released, and the images stay pending
    assert result["status"] == "FAILED"
    record = harness.record()
    assert record["status"] == "FAILED"
    assert "loss became NaN" in record["failure"]["cause"]
    assert harness.lock() is None and _pending(harness) == 4
    [notice] = harness.notifications()
    assert (
        notice["Subject"] == "retrain flowers: run flowers-00001 failed"
        and "loss became NaN" in notice["Message"]
    )
    not_before = datasets.get("flowers", table_name=harness.aws.datasets_table, client=harness.aws.dynamodb)[
        "not_before"
    ]
    assert not_before > record["finished_at"]


def test_throttled_tuning_is_retried_and_the_run_recovers(harness: Harness) -> None:
    # GIVEN SageMaker throttles the first CreateHyperParameterTuningJob
    harness.script.throttle_tuning = 1
    # WHEN the run executes
    result = harness.run({"dataset": "flowers"})
    # THEN the retry succeeds and so does the run
    assert result["status"] == "SUCCEEDED", result
    assert harness.script.throttle_tuning == 0
    assert len(harness.sagemaker.requests["tuning"]) == 1
    assert harness.record()["status"] == "SUCCEEDED"


def test_fixed_hyperparameters_skip_tuning(harness: Harness) -> None:
    # GIVEN a manual start with fixed hyperparameters and the S3 data source
    run_input = {
        "dataset": "flowers",
        "overrides": {"hyperparameters": {"lr": 0.02}, "data_source": "s3", "spot": False},
    }
    # WHEN it executes
    result = harness.run(run_input, name="manual-1")
    # THEN no tuning job or FSx import ran; one training job used FastFile from S3 and no MaxWait
    assert result["status"] == "SUCCEEDED", result
    assert "tuning" not in harness.sagemaker.requests and harness.fsx.requests == []
    [training] = harness.sagemaker.requests["training"]
    assert training["HyperParameters"]["lr"] == "0.02"
    assert training["InputDataConfig"][0]["InputMode"] == "FastFile"
    assert training["StoppingCondition"] == {"MaxRuntimeInSeconds": 600}


def test_an_invalid_input_fails_in_the_first_state_with_a_clear_error(harness: Harness) -> None:
    # GIVEN an input with a bad data set name and an unknown override
    result = harness.run({"dataset": "no such/set", "overrides": {"gpus": 8}}, name="bad-input")
    # THEN the execution fails, naming both problems, and no lock was taken
    assert result["status"] == "FAILED"
    # AND the execution's own error and cause say it (where Step Functions users look first)
    assert result["error"] == "InvalidRunInputError"
    assert "dataset" in result["cause"] and "gpus" in result["cause"]
    history = harness.aws.sfn.get_execution_history(executionArn=result["executionArn"])["events"]
    failed = [e for e in history if e["type"] == "LambdaFunctionFailed" or e["type"] == "TaskFailed"]
    cause = json.dumps([e for e in history if "Failed" in e["type"]], default=str)
    assert failed and "InvalidRunInputError" in cause
    assert "dataset" in cause and "gpus" in cause
    assert harness.lock() is None


def test_a_manual_start_while_a_run_is_active_is_refused(harness: Harness) -> None:
    # GIVEN the data set's lock is held by another run
    datasets.acquire(
        "flowers",
        "flowers-00001",
        "2026-01-01T00:00:00Z",
        table_name=harness.aws.datasets_table,
        client=harness.aws.dynamodb,
    )
    # WHEN a manual run starts
    result = harness.run({"dataset": "flowers"}, name="manual-2")
    # THEN it fails with DatasetBusyError naming the active run, opens no run record of its own,
    # and the other run keeps the lock
    assert result["status"] == "FAILED"
    assert result["error"] == "DatasetBusyError", result
    busy = "run flowers-00001 of data set 'flowers' is active; runs of a data set never overlap"
    assert busy in result["cause"]
    aws = harness.aws
    assert runs.get_run("flowers", "manual-2", table_name=aws.runs_table, client=aws.dynamodb) is None
    assert harness.lock() == "flowers-00001"


def _with_debugger_mode(harness: Harness, mode: str) -> None:
    harness.config = dataclasses.replace(harness.config, settings={**SETTINGS, "debugger_mode": mode})


@pytest.mark.parametrize(
    ("rule", "status", "words"),
    [
        ("ExplodingTensor", "REJECTED", "ExplodingTensor found issues in training"),
        # AWS's LossNotDecreasing fires at a plateau by design: it warns in managed mode
        ("LossNotDecreasing", "SUCCEEDED", "LossNotDecreasing found issues (warnings, not blocking)"),
    ],
)
def test_managed_debugger_mode_trains_with_rules_and_gates_on_their_statuses(
    harness: Harness, rule: str, status: str, words: str
) -> None:
    # GIVEN DebuggerMode=managed and a managed rule that finds issues
    _with_debugger_mode(harness, "managed")
    harness.script.rule_status, harness.script.rule_name = "IssuesFound", rule
    # WHEN the run executes
    result = harness.run({"dataset": "flowers"})
    # THEN the final training job carried the Debugger configs, no rule_check.py job ran,
    # and the managed rule's status blocked the model, or warned for a rule measured to false-alarm
    assert result["status"] == "SUCCEEDED", result
    [training] = harness.sagemaker.requests["training"]
    assert {"DebugHookConfig", "DebugRuleConfigurations", "ProfilerConfig"} <= set(training)
    entries = [
        r["AppSpecification"]["ContainerEntrypoint"][-1] for r in harness.sagemaker.requests["processing"]
    ]
    assert not any(e.endswith("rule_check.py") for e in entries)
    record = harness.record()
    assert record["status"] == status and words in record["gate"]["reason"], record["gate"]


def test_debugger_mode_off_checks_no_rules(harness: Harness) -> None:
    # GIVEN DebuggerMode=off
    _with_debugger_mode(harness, "off")
    # WHEN the run executes
    result = harness.run({"dataset": "flowers"})
    # THEN only the evaluation ran as a Processing job, training had no Debugger rules, the run succeeded
    assert result["status"] == "SUCCEEDED", result
    entries = [
        r["AppSpecification"]["ContainerEntrypoint"][-1] for r in harness.sagemaker.requests["processing"]
    ]
    assert entries == ["/opt/ml/code/evaluate.py"]
    assert "DebugRuleConfigurations" not in harness.sagemaker.requests["training"][0]
    assert harness.record()["rule_results"] == []


def test_a_refused_sagemaker_request_fails_at_once_with_sagemakers_message(harness: Harness) -> None:
    # GIVEN SageMaker refuses CreateHyperParameterTuningJob as invalid (no retry can fix that)
    harness.script.refuse_tuning = "ValidationException"
    # WHEN the run executes
    result = harness.run({"dataset": "flowers"})
    # THEN the request was sent once, and the run failed with SageMaker's own words in the record and the
    # execution's cause
    assert result["status"] == "FAILED"
    assert harness.script.tuning_attempts == 1
    assert result["error"] == "SageMaker.AmazonSageMakerException"
    record = harness.record()
    assert "ValidationException" in record["failure"]["cause"]
    assert (
        "less than or equal to 32" in record["failure"]["cause"]
        and "less than or equal to 32" in result["cause"]
    )
    assert harness.lock() is None


@pytest.fixture
def short_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wait states wait a second at most (the retry loops' backoff is 2..64 s on AWS)."""
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function import wait_function

    original = wait_function.WaitFunction._wait_interval
    monkeypatch.setattr(
        wait_function.WaitFunction,
        "_wait_interval",
        lambda self, env, wait_seconds: original(self, env=env, wait_seconds=min(wait_seconds, 1)),
    )


def test_throttling_that_outlasts_the_retries_fails_the_run(harness: Harness, short_waits: None) -> None:
    # GIVEN SageMaker throttles every attempt
    harness.script.refuse_tuning = "ThrottlingException"
    # WHEN the run executes (2+4+8+16+32+64 s of backoff on AWS; a second each here)
    result = harness.run({"dataset": "flowers"}, timeout=120)
    # THEN it retried a bounded number of times, then failed
    assert result["status"] == "FAILED"
    assert harness.script.tuning_attempts == 7


def test_when_recording_the_failure_fails_the_execution_still_carries_the_runs_error(
    harness: Harness,
) -> None:
    # GIVEN a run whose training fails and whose "Record the failure" step fails too
    harness.script.final_training = "Failed"
    harness.script.record_failure_breaks = True
    # WHEN it executes
    result = harness.run({"dataset": "flowers"})
    # THEN the execution fails with the training's error in its cause, and the recorder's after it
    assert result["status"] == "FAILED" and result["error"] == "RunFailed"
    assert result["cause"].startswith("States.TaskFailed: ") and "loss became NaN" in result["cause"]
    assert "the failure could not be recorded" in result["cause"] and "unreachable" in result["cause"]


def test_a_failed_job_ends_the_execution_with_its_reason(harness: Harness) -> None:
    harness.script.final_training = "Failed"
    result = harness.run({"dataset": "flowers"})
    assert result["status"] == "FAILED" and result["error"] == "TaskFailed"
    assert "loss became NaN" in result["cause"] and result["cause"] == harness.record()["failure"]["cause"]


def test_the_gate_waits_for_managed_rules_still_being_evaluated(harness: Harness) -> None:
    # GIVEN managed Debugger, whose rule evaluations are still running when the training job completes
    _with_debugger_mode(harness, "managed")
    harness.script.rules_pending_describes = 2  # the .sync poll sees one, the gate's first look the other
    # WHEN the run executes
    result = harness.run({"dataset": "flowers"}, timeout=120)
    # THEN the gate waited for the verdicts and decided on them
    assert result["status"] == "SUCCEEDED", result
    assert harness.script.rules_pending_describes == 0
    record = harness.record()
    assert record["gate"]["decision"] == "accepted"
    assert {r["status"] for r in record["rule_results"]} == {"NoIssuesFound"}


def _second_run(harness: Harness, **overrides: Any) -> dict[str, Any]:
    """A first run that registers a champion, two new uploads, and a second run with `overrides`."""
    assert harness.run({"dataset": "flowers"})["status"] == "SUCCEEDED"
    harness.upload("data/flowers/daisy/e.jpg", "data/flowers/tulip/f.png")
    return harness.run({"dataset": "flowers", "overrides": overrides}, name="flowers-00002")


def test_the_champion_is_evaluated_on_the_new_uploads_beside_tuning(harness: Harness) -> None:
    # GIVEN a data set with a champion and two new uploads, one of them a suspected label error
    harness.script.arrivals_top1, harness.script.arrivals_validation_top1 = 0.5, 0.9
    harness.script.arrivals_suspects = ("daisy/e.jpg",)
    # WHEN the second run executes (TrainWhen=always, SuspectLabels=keep: the defaults)
    result = _second_run(harness)
    # THEN the champion's job on the new uploads starts right after the freeze, before tuning, and the
    # flow does not wait for it there: it is started, not awaited
    assert result["status"] == "SUCCEEDED", result
    second = harness.sagemaker.order[harness.sagemaker.order.index("freeze", 1) :]
    assert second[:2] == ["freeze", "arrivals"], second
    [job] = harness.sagemaker.requests["arrivals"]
    assert "--hold-manifest" not in job["AppSpecification"]["ContainerArguments"]
    assert {i["S3Input"]["S3DataType"] for i in job["ProcessingInputs"]} == {"S3Prefix", "ManifestFile"}
    contracts.check("sagemaker", "CreateProcessingJob", job)
    # AND the run records its figures on exactly the two new uploads, the drift and the suspect
    record = harness.record("flowers-00002")
    figures = record["arrivals"]
    assert (figures["checked"], figures["new_images"], figures["sampled"]) == (2, 2, False)
    assert (figures["top1"], figures["validation_top1"]) == (0.5, 0.9)
    assert figures["drift"] == pytest.approx(0.4)
    assert (figures["suspect_count"], figures["suspect_rate"], figures["held"]) == (1, 0.5, 0)
    assert figures["status"] == "Completed" and figures["decision"] == "train"
    # AND the training jobs read the run's own manifest (keep), and the notification says it all
    channels = harness.sagemaker.requests["training"][-1]["InputDataConfig"]
    manifest = next(c for c in channels if c["ChannelName"] == container.CHANNEL_MANIFEST)
    assert manifest["DataSource"]["S3DataSource"]["S3Uri"].endswith("/manifest/")
    message = harness.notifications()[-1]["Message"]
    assert "The champion on 2 new uploads: top-1 0.5000" in message
    assert "(drift +0.4000)" in message and "Suspected label errors among them: 1 (50.0%), kept" in message


def test_the_flow_waits_for_the_champion_on_the_new_uploads_only_before_the_gate(
    harness: Harness, short_waits: None
) -> None:
    # GIVEN the champion's job on the new uploads still runs for a while after tuning and training end
    harness.script.arrivals_pending_describes = 2
    # WHEN the second run executes
    result = _second_run(harness)
    # THEN tuning and training went ahead while it ran; the flow looked at it only after training,
    # waited for it beside the evaluations, and recorded its figures
    assert result["status"] == "SUCCEEDED", result
    order = harness.sagemaker.order
    looked = order.index("describe arrivals")
    assert order.index("arrivals") < order.index("tuning", order.index("arrivals")) < looked
    assert order.count("describe arrivals") == 3
    assert harness.record("flowers-00002")["arrivals"]["checked"] == 2


def test_a_failed_check_of_the_new_uploads_never_fails_the_run(harness: Harness) -> None:
    # GIVEN the champion's job on the new uploads fails
    harness.script.arrivals_status = "Failed"
    # WHEN the second run executes
    result = _second_run(harness)
    # THEN the run goes on and registers its model; the record says the check gave no figures
    assert result["status"] == "SUCCEEDED", result
    record = harness.record("flowers-00002")
    assert record["status"] == "SUCCEEDED"
    assert record["arrivals"]["status"] == "Failed" and "top1" not in record["arrivals"]
    assert "The champion on the new uploads: no figures" in harness.notifications()[-1]["Message"]


@pytest.mark.parametrize("train_when", ["always", "drift"])
def test_a_refused_check_of_the_new_uploads_is_recorded_with_sagemakers_words(
    harness: Harness, short_waits: None, train_when: str
) -> None:
    # GIVEN SageMaker refuses to create the champion's job on the new uploads
    harness.script.refuse_arrivals = "ValidationException"
    # WHEN the second run executes, the check beside tuning (always) or before it (drift)
    result = _second_run(harness, train_when=train_when)
    # THEN the run trains and registers, and the record says why there are no figures, in SageMaker's words
    assert result["status"] == "SUCCEEDED", result
    record = harness.record("flowers-00002")
    assert record["status"] == "SUCCEEDED" and record["arrivals"]["status"] == "Failed"
    assert "processing job usage' is 0 Instances" in record["arrivals"]["problem"]
    assert record["arrivals"]["decision"] == "train"


def test_drift_ends_a_run_whose_champion_does_as_well_on_the_new_uploads(harness: Harness) -> None:
    # GIVEN a champion as good on the new uploads as on its validation split
    harness.script.arrivals_top1 = harness.script.arrivals_validation_top1 = 0.9
    # WHEN the second run executes under TrainWhen=drift
    result = _second_run(harness, train_when="drift")
    # THEN it ends NOT_NEEDED without tuning or training anything, as a success and not a failure
    assert result["status"] == "SUCCEEDED", result
    assert len(harness.sagemaker.requests["tuning"]) == 1  # the first run's
    record = harness.record("flowers-00002")
    assert record["status"] == "NOT_NEEDED"
    assert record["arrivals"]["decision"] == "not_needed"
    assert record["gate"]["reason"].startswith("no retraining needed: the champion's top-1 on 2 new")
    # AND its uploads joined the data set: nothing is pending, so no run starts again for them
    assert _pending(harness) == 0 and harness.lock() is None
    [_, notice] = harness.notifications()
    assert notice["Subject"] == "retrain flowers: no retraining needed"
    assert "TrainWhen=drift: no retraining needed" in notice["Message"]


def test_drift_trains_a_run_whose_champion_does_worse_on_the_new_uploads(harness: Harness) -> None:
    # GIVEN a champion whose top-1 on the new uploads (0.5, CI to 0.51) is below its validation's 0.9
    harness.script.arrivals_top1, harness.script.arrivals_validation_top1 = 0.5, 0.9
    # WHEN the second run executes under TrainWhen=drift
    result = _second_run(harness, train_when="drift")
    # THEN the flow waited for the check before tuning, and then trained and registered
    assert result["status"] == "SUCCEEDED", result
    second = harness.sagemaker.order[harness.sagemaker.order.index("freeze", 1) :]
    assert second[:4] == ["freeze", "arrivals", "describe arrivals", "tuning"], second
    record = harness.record("flowers-00002")
    assert record["status"] == "SUCCEEDED" and record["arrivals"]["reason"].startswith("drift: ")


def test_hold_keeps_the_suspects_out_of_the_runs_training(harness: Harness) -> None:
    # GIVEN one of the two new uploads is a suspected label error
    harness.script.arrivals_suspects = ("tulip/f.png",)
    # WHEN the second run executes under SuspectLabels=hold
    result = _second_run(harness, suspect_labels="hold")
    # THEN every training job reads the manifest without it, and the run says it held one
    assert result["status"] == "SUCCEEDED", result
    [job] = harness.sagemaker.requests["arrivals"]
    assert "--hold-manifest" in job["AppSpecification"]["ContainerArguments"]
    held = harness.record("flowers-00002")["arrivals"]
    assert held["held"] == 1
    tuning = harness.sagemaker.requests["tuning"][-1]["TrainingJobDefinition"]["InputDataConfig"]
    final = harness.sagemaker.requests["training"][-1]["InputDataConfig"]
    for channels in (tuning, final):
        manifest = next(c for c in channels if c["ChannelName"] == container.CHANNEL_MANIFEST)
        uri = manifest["DataSource"]["S3DataSource"]["S3Uri"]
        assert uri.endswith("/held-manifest/"), uri
        lines = harness.sagemaker._read(uri + container.MANIFEST_FILE).decode().splitlines()
        paths = [json.loads(line)[container.MANIFEST_PATH_KEY] for line in lines]
        assert "tulip/f.png" not in paths and "daisy/e.jpg" in paths
    assert "1 held out of this run's training" in harness.notifications()[-1]["Message"]
