"""A tuning job's checkpoints: what each trial's start copies, and the evaluation jobs a run starts.

A tuning job of --trials trials, --parallel at a time, runs against moto's S3 while the control plane's
own code handles each event as EventBridge delivers it (controller.checkpoint_eval, controller.job_ended).
Each trial writes a checkpoint every --every steps for --steps steps under the shared CheckpointConfig
prefix and keeps the newest 3 (the trainer prunes, SageMaker deletes the pruned copy in S3). A trial
starts in the slot the previous one frees, as the tuner starts them: its start lists the prefix while
the ended trial's event is handled, then reads every object it listed (SageMaker copies S3Uri into
LocalPath). The second slot starts half a trial later, so starts also meet the other trial's writes.

How an ended trial's checkpoints are freed:
  keep     not at all until the tuning job ends;
  delete   deleted when the trial ends (the code before issue 29's fix);
  empty    emptied in place when the trial ends, deleted when the tuning job ends (this code).
Per way: the checkpoints (non-empty objects) a trial's start copies, the listed objects gone before
they were read (each fails that start), and what is left when the tuning job has ended. Apart: the
checkpoint evaluation jobs the run starts with the stack's defaults (every CheckpointEvaluationEvery-th
checkpoint, at most CheckpointEvaluationMaxPerRun) and with no cap (the code before issue 29), and the
size of one real checkpoint of each architecture (train.py's state with AdamW), which scales the copies.

    .venv/bin/python bench/run_jobs.py [--trials 8 --parallel 2 --steps 1000 --every 50] \\
        [--append BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "Retrain")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")

from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent
from botocore.exceptions import ClientError

from bench import results
from controller import checkpoint_eval, job_ended, names, runs
from retrain_contract import container

ROOT = Path(__file__).resolve().parent.parent

# The control-plane tests' moto account (a `tests` package in site-packages shadows the project's).
_spec = importlib.util.spec_from_file_location("support", ROOT / "tests/unit/functions/support.py")
assert _spec is not None and _spec.loader is not None
support = sys.modules["support"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)

DATASET, RUN, TUNING = "bench", "bench-00001", "bench-tuning"
KEEP = int(container.HYPERPARAMETER_DEFAULTS[container.HP_KEEP_CHECKPOINTS])  # type: ignore[call-overload]
STAND_IN = b"c" * 1024  # each checkpoint's body here; the table counts checkpoints, the sizes scale them
WAYS = ("keep", "delete", "empty")


@dataclass
class Outcome:
    """One way of freeing checkpoints, over one tuning job."""

    copied: list[int] = field(default_factory=list)  # checkpoints each trial's start copied
    vanished: int = 0  # listed objects a start could not read
    failed_starts: int = 0
    left: int = 0  # objects under the prefix once the tuning job's end was handled
    evaluations: int = 0  # CreateProcessingJob calls of checkpoint evaluations


class _Trials:
    """SageMaker's answers about the tuning job's trials (moto runs no tuning job)."""

    def __init__(self, sagemaker: Any, trials: list[str]) -> None:
        self._sagemaker = sagemaker
        self.trials = trials

    def describe_training_job(self, TrainingJobName: str) -> dict[str, Any]:  # noqa: N803 (boto3's name)
        arn = f"arn:aws:sagemaker:us-east-1:123456789012:hyper-parameter-tuning-job/{TUNING}"
        return {"TrainingJobName": TrainingJobName, "TuningJobArn": arn, "TrainingTimeInSeconds": 60}

    def list_training_jobs_for_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]:
        return {"TrainingJobSummaries": [{"TrainingJobName": t} for t in self.trials]}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sagemaker, name)


def _event(detail_type: str, source: str, detail: dict[str, Any]) -> EventBridgeEvent:
    return EventBridgeEvent({"detail-type": detail_type, "source": source, "detail": detail})


def _tags() -> dict[str, str]:
    return {names.TAG_DATASET: DATASET, names.TAG_RUN_ID: RUN}


@dataclass
class Tuning:
    """The simulated tuning job on one moto account, with the way it frees checkpoints."""

    aws: Any
    config: Any
    way: str
    trials: list[str]
    outcome: Outcome = field(default_factory=Outcome)

    def __post_init__(self) -> None:
        self.sagemaker: Any = _Trials(self.aws.sagemaker, self.trials)
        self.prefix = names.checkpoint_prefix(DATASET, RUN)

    def handle(self, event: EventBridgeEvent) -> dict[str, Any]:
        return checkpoint_eval.evaluate_checkpoints(
            event, config=self.config, dynamodb=self.aws.dynamodb, sagemaker=self.sagemaker, s3=self.aws.s3
        )

    def write(self, trial: str, step: int) -> None:
        """One checkpoint as SageMaker syncs it (and S3's event for it), then the trainer's pruning."""
        folder = f"{names.job_checkpoint_prefix(DATASET, RUN, trial)}algo-1/"
        key = folder + container.checkpoint_name(step)
        put = self.aws.s3.put_object(Bucket=self.aws.artifact_bucket, Key=key, Body=STAND_IN)
        detail = {"key": key, "size": len(STAND_IN), "version-id": put["VersionId"]}
        bucket = {"name": self.aws.artifact_bucket}
        result = self.handle(_event("Object Created", "aws.s3", {"bucket": bucket, "object": detail}))
        self.outcome.evaluations += result["action"] == "started"
        listed = self.aws.s3.list_objects_v2(Bucket=self.aws.artifact_bucket, Prefix=folder)
        for old in sorted(o["Key"] for o in listed.get("Contents", []))[:-KEEP]:
            self.aws.s3.delete_object(Bucket=self.aws.artifact_bucket, Key=old)

    def end(self, trial: str) -> None:
        if self.way == "keep":
            return
        if self.way == "delete":
            prefix = names.job_checkpoint_prefix(DATASET, RUN, trial)
            job_ended.drop_checkpoints(prefix, config=self.config, s3=self.aws.s3)
            return
        detail = {"TrainingJobName": trial, "TrainingJobStatus": "Completed", "Tags": _tags()}
        self.handle(_event("SageMaker Training Job State Change", "aws.sagemaker", detail))

    def start(self, ended: str | None) -> None:
        """List the prefix, let the ended trial's event be handled, then read what was listed."""
        listed = self.aws.s3.list_objects_v2(Bucket=self.aws.artifact_bucket, Prefix=self.prefix)
        keys = [o["Key"] for o in listed.get("Contents", [])]
        if ended is not None:
            self.end(ended)
        copied = gone = 0
        for key in keys:
            try:
                body = self.aws.s3.get_object(Bucket=self.aws.artifact_bucket, Key=key)["Body"].read()
            except ClientError:
                gone += 1
                continue
            copied += bool(body)
        self.outcome.copied.append(copied)
        self.outcome.vanished += gone
        self.outcome.failed_starts += gone > 0

    def finish(self, last: list[str]) -> None:
        for trial in last:
            self.end(trial)
        if self.way != "delete":
            detail = {
                "HyperParameterTuningJobName": TUNING,
                "HyperParameterTuningJobStatus": "Completed",
                "Tags": _tags(),
            }
            self.handle(_event("SageMaker HyperParameter Tuning Job State Change", "aws.sagemaker", detail))
        listed = self.aws.s3.list_objects_v2(Bucket=self.aws.artifact_bucket, Prefix=self.prefix)
        self.outcome.left = len(listed.get("Contents", []))


def simulate(way: str, args: argparse.Namespace, *, cap: int) -> Outcome:
    """One tuning job on a fresh moto account; `cap` is CheckpointEvaluationMaxPerRun."""
    checkpoints_per_trial = args.steps // args.every
    trials = [f"{TUNING}-{n:03d}-0000abcd" for n in range(1, args.trials + 1)]
    session = support.moto_aws()
    aws = next(session)
    try:
        base = support.make_config(aws)
        config = dataclasses.replace(
            base,
            checkpoint_eval_every=args.evaluate_every,
            checkpoint_eval_max_per_run=cap,
            settings={**base.settings, "training_image": "img"},
        )
        runs.put_run(
            {"dataset": DATASET, "run_id": RUN, "status": "RUNNING"},
            table_name=aws.runs_table,
            client=aws.dynamodb,
        )
        tuning = Tuning(aws, config, way, trials)
        # slot s runs trials s, s + parallel, ...; slot s starts s/parallel of a trial late
        timeline: list[tuple[int, int, str, int]] = []  # (tick, order, trial, checkpoint number; 0 = start)
        length = checkpoints_per_trial + 1  # a start, then its checkpoints; the next starts after them
        for index, trial in enumerate(trials):
            slot, round_ = index % args.parallel, index // args.parallel
            begin = round_ * length + slot * length // args.parallel
            timeline += [(begin + c, 1 if c else 0, trial, c) for c in range(checkpoints_per_trial + 1)]
        previous: dict[int, str] = {}
        for _, _, trial, number in sorted(timeline):
            slot = trials.index(trial) % args.parallel
            if number == 0:
                tuning.start(previous.get(slot))
            else:
                tuning.write(trial, number * args.every)
            previous[slot] = trial
        tuning.finish(list(previous.values()))
        return tuning.outcome
    finally:
        session.close()


def checkpoint_megabytes(model: str) -> float:
    """The size of one checkpoint train.py writes for `model` with AdamW (a state after one step)."""
    import torch

    from retrain_training import checkpoints, models

    net = models.build_model(model, 1000)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    net(torch.randn(2, 3, 64, 64)).sum().backward()
    optimizer.step()
    state = {"model": net.state_dict(), "optimizer": optimizer.state_dict()}
    return len(checkpoints.encode(state)) / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--steps", type=int, default=1000, help="steps of each trial")
    parser.add_argument("--every", type=int, default=50, help="CheckpointEverySteps")
    parser.add_argument("--evaluate-every", type=int, default=2, help="CheckpointEvaluationEvery")
    parser.add_argument("--cap", type=int, default=20, help="CheckpointEvaluationMaxPerRun")
    parser.add_argument("--append", type=Path)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    outcomes = {way: simulate(way, args, cap=args.cap) for way in WAYS}
    uncapped = simulate("empty", args, cap=10**9)
    sizes = {model: checkpoint_megabytes(model) for model in ("resnet18", container.MODEL_EFFICIENTNET_LITE0)}
    lines = [
        f"## A tuning job's checkpoints and evaluation jobs (bench/run_jobs.py, {results.when()})",
        "",
        results.machine_line(load_before, os.getloadavg()[0]),
        f"{args.trials} trials, {args.parallel} at a time, {args.steps} steps each, a checkpoint every "
        f"{args.every} steps, the newest {KEEP} kept; the control plane's handlers on moto.",
        "",
        "| ended trials' checkpoints | copied at a trial's start: mean | max | listed objects gone "
        "before read | starts that fail | objects left after the tuning job |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for way, o in outcomes.items():
        lines.append(
            f"| {way} | {sum(o.copied) / len(o.copied):.1f} | {max(o.copied)} | {o.vanished} "
            f"| {o.failed_starts} of {len(o.copied)} | {o.left} |"
        )
    checkpoints = args.trials * (args.steps // args.every)
    lines += [
        "",
        f"Checkpoint evaluation jobs the run starts ({checkpoints} checkpoints, one in "
        f"{args.evaluate_every} evaluated): {outcomes['empty'].evaluations} with "
        f"CheckpointEvaluationMaxPerRun {args.cap}, {uncapped.evaluations} with no cap.",
        "One checkpoint (train.py's state, AdamW): "
        + ", ".join(f"{model} {mb:.0f} MB" for model, mb in sizes.items())
        + ".",
        "",
    ]
    results.publish("\n".join(lines), args.append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
