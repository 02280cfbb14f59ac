"""The end-to-end flow the embedded-runtime tests share: images uploaded, the stack left to run."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller import names, runs
from retrain.demo import data as demo_data
from retrain.demo.flow import DEMO_PARAMETERS
from retrain.embedded.faults import Faults
from retrain.embedded.sagemaker import SpotSchedule
from retrain.embedded.stack import EmbeddedStack
from retrain.report import timing

# A name with '_': SageMaker refuses it in a model package group name, so registration must derive one.
DATASET = "hand_digits"
IMAGES = 200
RUN_TIMEOUT_SECONDS = 1200


@dataclass
class Finished:
    stack: EmbeddedStack
    outputs: dict[str, str]
    record: runs.RunRecord


def outputs_of(stack: EmbeddedStack) -> dict[str, str]:
    described = stack.client("cloudformation").describe_stacks(StackName=stack.stack_name)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in described["Outputs"]}


@dataclass(frozen=True)
class Uploads:
    """What a run uploads: digits [start, start + count) written to `images`, or `files` (<label>/<file>
    -> bytes, of which `count` are good images)."""

    images: Path
    count: int = IMAGES
    start: int = 0
    files: dict[str, bytes] | None = None


@contextmanager
def run_to_the_end(
    state_dir: Path,
    uploads: Uploads,
    faults: Faults,
    *,
    overrides: dict[str, str] | None = None,
    keep_state: bool = False,
    before_upload: Callable[[EmbeddedStack, dict[str, str]], None] | None = None,
    interruptions: int = 1,
) -> Iterator[Finished]:
    """Upload `uploads`, wait for a run the state directory did not hold before to end (each spot training
    job interrupted `interruptions` times); the stack stops when the block ends, whatever happened. When
    the block passes, the state directory (gigabytes of job trees, checkpoints and snapshots) is removed
    unless `keep_state`; a failed test keeps it for its post-mortem."""
    count, files = uploads.count, uploads.files
    if files is None:
        written = demo_data.write_digits(uploads.images, limit=uploads.count, start=uploads.start).files
        files = {f"{p.parent.name}/{p.name}": p.read_bytes() for p in written}
        count = len(written)
    # A few hundred images for a few epochs train a weak model: the quality bar is the gate's own tests'
    # subject, here the path through the gate to the registry is. So is the floor of training steps
    # (MinTrainingSteps would make these small runs train 4-16 times as many steps): test_cli_demo.py and
    # the training tests hold it.
    parameters = {
        **DEMO_PARAMETERS,
        "MinNewImages": str(count),
        "MinAccuracy": "0.0",
        "MinTrainingSteps": "0",
    }
    parameters.update(overrides or {})
    with EmbeddedStack(
        state_dir,
        parameter_overrides=parameters,
        faults=faults,
        spot=SpotSchedule(interruptions=interruptions),
    ) as stack:
        outputs = outputs_of(stack)
        s3, dynamodb = stack.client("s3"), stack.client("dynamodb")
        table = outputs[names.STACK_OUTPUTS["runs_table"]]
        earlier = {r["run_id"] for r in runs.list_runs(table_name=table, dataset=DATASET, client=dynamodb)}
        if before_upload is not None:
            before_upload(stack, outputs)
        started = time.monotonic()
        for relative, body in files.items():  # the only calls: the rest is the stack's own event path
            label, filename = relative.split("/")
            key = names.upload_key(DATASET, label, filename)
            s3.put_object(Bucket=outputs[names.STACK_OUTPUTS["data_bucket"]], Key=key, Body=body)
        sfn = stack.client("stepfunctions")
        record: runs.RunRecord | None = None
        # The run's record is final a state or two before its execution ends (the notification follows):
        # wait for both, so that a test reads the whole execution.
        while time.monotonic() - started < RUN_TIMEOUT_SECONDS:
            found = [
                r
                for r in runs.list_runs(table_name=table, dataset=DATASET, client=dynamodb)
                if r["run_id"] not in earlier
            ]
            if (
                found
                and found[0]["status"] in runs.FINAL_STATUSES
                and sfn.describe_execution(executionArn=found[0]["execution_arn"])["status"] != "RUNNING"
            ):
                record = found[0]
                break
            time.sleep(2)
        assert record is not None, f"no finished run and execution after {RUN_TIMEOUT_SECONDS} s"
        _print_timing(stack, record, time.monotonic() - started)
        yield Finished(stack, outputs, record)
    if not keep_state:  # reached only when the block raised nothing
        shutil.rmtree(state_dir, ignore_errors=True)


def _print_timing(stack: EmbeddedStack, record: runs.RunRecord, seconds: float) -> None:
    """Where the run's time went (pytest shows it with a failure, or with -s): uploads to the run's
    end, and the execution's phases from its history."""
    phases = timing.run_phases(stack.client("stepfunctions"), record["execution_arn"])
    parts = ", ".join(f"{phase.name} {phase.seconds:.0f}" for phase in phases)
    execution = sum(phase.seconds for phase in phases)
    print(
        f"run {record['run_id']}: {seconds:.0f} s from the first upload; execution {execution:.0f} s: {parts}"
    )


def lock_holder(finished: Finished) -> Any:
    item = finished.stack.client("dynamodb").get_item(
        TableName=finished.outputs[names.STACK_OUTPUTS["datasets_table"]],
        Key={names.DATASETS_PK: {"S": DATASET}},
        ConsistentRead=True,
    )
    return item.get("Item", {}).get(names.LOCK_ATTRIBUTE)
