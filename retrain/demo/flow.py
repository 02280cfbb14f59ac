"""`retrain demo`: the whole flow on the embedded stack, from uploads to a finished run.

It writes the digits (or takes a folder of images), starts the embedded stack with the demo's
parameters, faults and spot schedule, and for each upload wave (two for the digits, see `waves`) uploads
the files in batches, waits for the run they start (showing how many the ledger has recorded) and
follows it to its end; a later wave goes up while the run before it trains. The command
(``retrain.commands.demo``) reports on the runs; the digits themselves come from :mod:`retrain.demo.data`.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from controller import names, runs
from retrain import local
from retrain.data.upload import LocalFile, check_dataset_name, find_files, likely_images, upload_files
from retrain.demo import data as demo_data
from retrain.deployment import Deployment
from retrain.errors import RetrainError, UsageError
from retrain.report.collect import ledger_partitions, uploads
from retrain.report.facts import Rejected, RunFacts
from retrain.report.job_logs import MetricPoint
from retrain.report.timing import Phase
from retrain.run.follow import ENDED_WELL, execution_history, follow, wait_for_run
from retrain.run.start import Overrides, start_run
from retrain.serve.predict import predict
from retrain_contract import container as contract

DEMO_DATASET = "digits"
DEMO_BATCHES = 3
DEMO_TIMEOUT_MINUTES = 60
DEMO_TARGET_ACCURACY = 0.9  # the top-1 the demo's runs are meant to reach (README: its measured runs)
# Template parameters the demo overrides so both runs finish in minutes on 2 CPU
# cores: two spot trials at a time, the best trial shipped without a final retraining, a checkpoint at
# each epoch's end, a short quiet period before a run starts, and the price of a CPU instance, which is what
# really runs here. The digits are 8x8 images: ResNet-18 at 32 pixels from random weights (the image has
# no ImageNet ResNet weights, and ImageNet features do not see 32-pixel digits), with a crop floor of half
# the image. AdamW over 3e-4..2e-3 learns them from scratch in 5 epochs: trials on the first wave's 898
# images reached val-accuracy 0.92-0.95 across that range, where SGD at 0.01-0.1 gave 0.50-0.94; the same
# range fine-tunes ImageNet EfficientNet-Lite0 on photos (bench/transfer.py). The demo also sets
# MinNewImages to the size of an upload wave, so each run starts with its whole wave however far the
# emulated ingest lags behind the uploads (see _run_wave for refused uploads).
DEMO_PARAMETERS = {
    "TrainingInstanceType": "ml.m5.xlarge",
    "ModelArchitecture": "resnet18",
    "Epochs": "5",
    "ImageSize": "32",
    "CropScaleMin": "0.5",
    "LearningRateMin": "0.0003",
    "LearningRateMax": "0.002",
    "Optimizers": "adamw",
    "BatchSize": "32",
    # a checkpoint at each epoch's end only (and at SIGTERM), not every 50 steps as well: each is 134 MB
    # (ResNet-18 and its AdamW moments) through the embedded S3 and back at a resume
    "CheckpointEverySteps": "0",
    # every 4th checkpoint of a trial evaluated, not the stack's every 2nd: 18 Processing jobs a demo
    # shared the 2 cores with training (BENCHMARKS.md, "make demo")
    "CheckpointEvaluationEvery": "4",
    "FinalTraining": "false",
    "MaxTuningJobs": "2",
    "MaxParallelTuningJobs": "2",
    "ImportPollSeconds": "2",
    "MinNewImages": "1",
    # as long as the freezing job's fence (retrain_contract.ledger.RECORD_FENCE_SECONDS): a run that
    # starts after it puts its cut that far back, and its freezing job need not wait (prepare.cut_of)
    "QuietPeriodSeconds": "20",
    "MaxWaitSeconds": "1800",
    # Run 2 starts from run 1's champion, a ResNet-18 that learnt these digits: the whole network at the full
    # rate, BatchNorm statistics updated (the stack's 0.1x and frozen statistics keep ImageNet features for a
    # new domain): validation top-1 0.944 -> 0.978 in the same time (BENCHMARKS.md, "make demo")
    "FineTuneBackboneLrFactorMin": "1",
    "FineTuneBackboneLrFactorMax": "1",
    "FineTuneBatchNorm": "train",
    # Every run, trial and model in MLflow: the stack's own MLflow app, its store in the state directory
    # (`retrain ui` opens it).
    "MlflowTracking": "create",
}
# `--images DIR` (and `retrain local up`): the user's photos get the stack's architecture, start and
# fine-tuning recipe (ImageNet EfficientNet-Lite0, the FineTune* defaults: its BatchNorm statistics kept;
# MinTrainingSteps), at 128 pixels rather than 224 so that two trials fit the demo's minutes on 2 CPU cores.
PHOTO_PARAMETERS = {
    **{
        k: v
        for k, v in DEMO_PARAMETERS.items()
        if k not in ("ModelArchitecture", "CropScaleMin") and not k.startswith("FineTune")
    },
    "ImageSize": "128",
}


@dataclass(frozen=True)
class DemoOptions:
    """The demo's command-line options."""

    images: Path | None = None
    dataset: str = DEMO_DATASET
    interrupt: int = 1
    faults: tuple[str, ...] = ()
    limit: int | None = None
    parameters: tuple[tuple[str, str], ...] = ()  # stack parameters set over the demo's (--parameter)
    batches: int = DEMO_BATCHES
    timeout_minutes: int = DEMO_TIMEOUT_MINUTES
    state_dir: Path = local.DEFAULT_STATE_DIR


@dataclass(frozen=True)
class DemoRun:
    """A demo's runs once they ended, with the stack they ran on (open while the context lasts)."""

    deployment: Deployment
    records: list[runs.RunRecord]  # one per upload wave, in order
    upload_keys: set[str]
    clock: Clock  # the demo's own steps, before and around the runs: where its wall time went
    held_out: list[LocalFile]  # digits no run saw, for the champion's endpoint to classify at the end

    @property
    def record(self) -> runs.RunRecord:
        """The last run: the one the demo reports on."""
        return self.records[-1]


def check_options(options: DemoOptions) -> None:
    """Refuse options that cannot go together, before anything starts."""
    check_dataset_name(options.dataset)
    if options.images is not None and options.limit is not None:
        raise UsageError("--limit applies to the digits; with --images, put fewer images in the folder")


def waves(files: list[LocalFile], new_label: str) -> list[list[LocalFile]]:
    """The digits as two uploads of the same number of images: the first without `new_label`, the second
    with all of it and the rest of the other labels (every label in both, interleaved).

    The demo's MinNewImages is that number, so each run starts once its whole wave is recorded however
    far ingest lags behind the uploads. Files that are not images go with the first wave (the control
    plane rejects them); with an odd count one image stays out. With too few images besides the new
    label to fill a first wave, there is one wave with everything."""
    images = likely_images(files)
    kept = {id(f) for f in images}
    others = [f for f in files if id(f) not in kept]
    new = [f for f in images if _label(f) == new_label]
    old = _interleaved([f for f in images if _label(f) != new_label])
    size = len(images) // 2
    if not new or len(new) > size or len(old) < size:
        return [files]
    first = old[:size] + others
    second = old[size : 2 * size - len(new)] + new
    return [first, second]


# The digits the demo never uploads: one of each of these labels, classified by the champion at the end.
HELD_OUT_LABELS = demo_data.LABELS[::2]


def hold_out(
    files: list[LocalFile], labels: tuple[str, ...] | list[str]
) -> tuple[list[LocalFile], list[LocalFile]]:
    """(files to upload, files held out): the last image of each of `labels` stays out of every upload."""
    images = likely_images(files)
    held = [found[-1] for label in labels if (found := [f for f in images if _label(f) == label])]
    kept = {id(f) for f in held}
    return [f for f in files if id(f) not in kept], held


def _label(file: LocalFile) -> str:
    return file.relative.split("/", 1)[0]


def _interleaved(files: list[LocalFile]) -> list[LocalFile]:
    """Round robin over the labels, each in its own order, so any prefix holds every label."""
    by_label: dict[str, list[LocalFile]] = {}
    for file in files:
        by_label.setdefault(_label(file), []).append(file)
    rank = {id(f): i for group in by_label.values() for i, f in enumerate(group)}
    return sorted(files, key=lambda f: (rank[id(f)], _label(f)))


@contextlib.contextmanager
def run_demo(options: DemoOptions, *, console: Console, quiet: bool) -> Iterator[DemoRun]:
    """Upload each wave, wait for the run it starts and follow it; yields the runs with the stack still up.

    The digits come in two waves (:func:`waves`): the second run starts from the first one's champion and
    grows its head for the new label. The second wave is uploaded once the first run has started, while it
    trains, as a user's next uploads arrive: they wait in the ledger for the next run, which the dispatcher
    starts when the first one releases the data set. ``quiet`` leaves out the progress lines between steps
    (the JSON output wants stdout to itself)."""
    check_options(options)
    clock = Clock()
    with contextlib.ExitStack() as cleanup:
        root = options.images
        if root is None:
            folder = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="retrain-digits-")))
            root = _write_digits(folder, options.limit, console=console, quiet=quiet)
        files = find_files(root)
        held: list[LocalFile] = []
        if options.images is None:
            files, held = hold_out(files, HELD_OUT_LABELS)
        uploads = [files] if options.images is not None else waves(files, demo_data.LABELS[-1])
        clock.lap("write the images")
        parameters = demo_parameters(options, min(len(likely_images(wave)) for wave in uploads))
        deployment = cleanup.enter_context(_start_stack(options, parameters))
        clock.lap("start the embedded stack")
        wave_run = _WaveRun(deployment, options, clock, int(parameters["MinNewImages"]), console, quiet)
        records: list[runs.RunRecord] = []
        keys: set[str] = set()
        training: runs.RunRecord | None = None  # the run started by the last wave, not followed yet
        for wave in uploads:
            if training is not None:
                wave_run.until_training(training)
            keys |= wave_run.upload(wave, beside=training)
            if training is not None:
                records.append(wave_run.finish(training))
                training = None
                if records[-1]["status"] not in ENDED_WELL:
                    break  # a later run would only repeat the failure
            training = wave_run.start()
        if training is not None:
            records.append(wave_run.finish(training))
        yield DemoRun(deployment, records, keys, clock, held)


@dataclass
class _WaveRun:
    """The steps of the demo's upload waves: upload one and wait until the ledger holds every upload,
    accepted or refused (:meth:`upload`), wait for the run it starts (:meth:`start`), follow that run to
    its end (:meth:`finish`). `since` and the counts describe the last wave uploaded."""

    deployment: Deployment
    options: DemoOptions
    clock: Clock
    min_new_images: int
    console: Console
    quiet: bool
    since: str = ""
    accepted: int = 0
    refused: int = 0
    uploaded: int = 0

    def upload(self, files: list[LocalFile], *, beside: runs.RunRecord | None) -> set[str]:
        """Upload the wave and wait until each upload is recorded; `beside` is the run training meanwhile
        (the laps say so). When the control plane refused them all, nothing trains: the error names each."""
        during = f" (run {beside['run_id']} trains meanwhile)" if beside is not None else ""
        self.since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")
        keys = _upload_in_batches(
            self.deployment, files, self.options, console=self.console, quiet=self.quiet
        )
        self.clock.lap("upload" + during)
        accepted, rejected = wait_until_recorded(
            self.deployment,
            self.options.dataset,
            self.since,
            set(keys),
            console=self.console,
            timeout_seconds=self.options.timeout_minutes * 60,
        )
        self.clock.lap("ingest" + during)
        if not accepted:
            raise NothingAcceptedError(
                f"none of the {len(keys)} uploads to data set {self.options.dataset!r} was accepted, so no "
                "run starts:\n"
                + "\n".join(f"  {r.key}: {r.reason}" for r in rejected[:MAX_REASONS])
                + (f"\n  ... and {len(rejected) - MAX_REASONS} more" if len(rejected) > MAX_REASONS else "")
                + "\nfix or replace these files (JPEG or PNG images in DIR/<label>/) and run the demo again"
            )
        self.accepted, self.refused, self.uploaded = accepted, len(rejected), len(keys)
        return set(keys)

    def start(self) -> runs.RunRecord:
        """The run the last uploaded wave starts, once it exists.

        The stack's MinNewImages is the count of the wave's likely images: with all of them accepted, the
        dispatcher starts the run as it does on AWS. When the control plane refused some for their
        content (a truncated JPEG, text named .jpg, a duplicate), fewer are pending than MinNewImages and
        the demo starts the run by hand, as `retrain start` does."""
        run_id = execution_arn = None
        if self.accepted < self.min_new_images:
            execution_arn, run_id = start_run(self.deployment, self.options.dataset, Overrides())
            self.console.print(
                f"{self.refused} of {self.uploaded} uploads were refused, so fewer than MinNewImages "
                f"({self.min_new_images}) are pending: started run {run_id} by hand, as `retrain start` does"
            )
        record = wait_for_run(
            self.deployment,
            self.options.dataset,
            since=self.since,
            run_id=run_id,
            execution_arn=execution_arn,
            timeout_seconds=self.options.timeout_minutes * 60,
            poll_seconds=1,
        )
        self.clock.lap("wait for the run to start")
        return record

    def until_training(self, record: runs.RunRecord, poll_seconds: float = 1.0) -> None:
        """Wait until the run's trials train (its tuning job started) or its execution ended: the next
        wave's uploads, served by this process, then do not slow the run's preparation."""
        table = self.deployment.output(names.STACK_OUTPUTS["runs_table"])
        dynamodb, sfn = self.deployment.client("dynamodb"), self.deployment.client("stepfunctions")
        deadline = time.monotonic() + self.options.timeout_minutes * 60
        while time.monotonic() < deadline:
            found = runs.get_run(record["dataset"], record["run_id"], table_name=table, client=dynamodb)
            arn = (found or record).get("execution_arn")
            if arn:
                if sfn.describe_execution(executionArn=arn)["status"] != "RUNNING":
                    break
                if "tuning" in execution_history(sfn, arn)[2].values():
                    break
            time.sleep(poll_seconds)
        self.clock.lap(f"until run {record['run_id']}'s trials train")

    def finish(self, record: runs.RunRecord) -> runs.RunRecord:
        """Follow the run to its end and until MLflow tracked it."""
        record = follow(
            self.deployment,
            record,
            console=self.console,
            live=self.console.is_terminal,
            timeout_seconds=self.options.timeout_minutes * 60,
        )
        self.clock.lap(RUN_PHASE + record["run_id"])
        record = wait_until_tracked(self.deployment, record)
        self.clock.lap("track the run in MLflow")
        return record


TRACKING_WAIT_SECONDS = 120


def wait_until_tracked(
    deployment: Deployment, record: runs.RunRecord, timeout_seconds: float = TRACKING_WAIT_SECONDS
) -> runs.RunRecord:
    """The run's record once its end is tracked in MLflow (the tracking function sets
    names.RUN_TRACKING_DONE_AT on the execution's end event, a moment after the run ends), so that the
    demo's stack does not stop before; as it is after `timeout_seconds`, or when the stack tracks nothing."""
    if not deployment.outputs.get(names.STACK_OUTPUTS["mlflow"]):
        return record
    table = deployment.output(names.STACK_OUTPUTS["runs_table"])
    deadline = time.monotonic() + timeout_seconds
    while names.RUN_TRACKING_DONE_AT not in record and time.monotonic() < deadline:
        time.sleep(1)
        found = runs.get_run(
            record["dataset"], record["run_id"], table_name=table, client=deployment.client("dynamodb")
        )
        record = found if found is not None else record
    return record


MAX_REASONS = 20  # refused uploads the demo's error lists (`retrain status` lists them all)


class NothingAcceptedError(RetrainError):
    """Every upload of a demo wave was refused: there is nothing to train on."""


def wait_until_recorded(
    deployment: Deployment,
    dataset: str,
    since: str,
    keys: set[str],
    *,
    console: Console,
    timeout_seconds: float,
    poll_seconds: float = 2.0,
) -> tuple[int, list[Rejected]]:
    """Wait until the ledger has a row, accepted or refused, for every key of `keys` recorded since
    `since`; the accepted count and the refusals with their reasons. Shows the progress as it changes."""
    dynamodb = deployment.client("dynamodb")
    table = deployment.output(names.STACK_OUTPUTS["ledger_table"])
    deadline = time.monotonic() + timeout_seconds
    last = -1
    while True:
        rows = [
            row
            for partition in ledger_partitions(deployment, dataset).all()
            for page in dynamodb.get_paginator("query").paginate(
                TableName=table,
                KeyConditionExpression="#pk = :partition",
                FilterExpression="recorded_at >= :since",
                ExpressionAttributeNames={"#pk": names.LEDGER_PK},
                ExpressionAttributeValues=runs.serialize({":partition": partition, ":since": since}),
            )
            for row in page.get("Items", [])
        ]
        accepted, rejected = uploads([runs.deserialize(row) for row in rows], keys)
        recorded = accepted + len(rejected)
        if recorded != last:
            console.print(
                f"waiting for the run: {recorded} of {len(keys)} uploads recorded in the ledger "
                f"({len(rejected)} refused)"
            )
            last = recorded
        if recorded >= len(keys):
            return accepted, rejected
        if time.monotonic() >= deadline:
            raise RetrainError(
                f"only {recorded} of {len(keys)} uploads to data set {dataset!r} were recorded within "
                f"{int(timeout_seconds)} s: check the ingest queue's dead-letter queue and `retrain status`"
            )
        time.sleep(poll_seconds)


RUN_PHASE = "run "


class Clock:
    """Wall-clock laps of the demo's steps."""

    def __init__(self) -> None:
        self.phases: list[Phase] = []
        self._last = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.phases.append(Phase(name, now - self._last))
        self._last = now


def held_out_table(ran: DemoRun, dataset: str) -> Table | str:
    """The champion's answers for the digits no run saw, through its endpoint on the embedded stack
    (approved and deployed as `retrain predict --approve` does), or why there are none."""
    try:
        arn, endpoint, answers = predict(
            ran.deployment,
            [f.path for f in ran.held_out],
            dataset=dataset,
            package_arn=None,
            approve_package=True,
        )
    except RetrainError as error:
        return f"no classification of the held-out digits: {error}"
    right = 0
    table = Table(
        title=f"The champion classifies digits no run saw (endpoint {endpoint}, {arn})",
        title_justify="left",
        header_style="bold",
        box=None,
    )
    for column in ("image", "label", "answer", "probability", "next"):
        table.add_column(column)
    for file, answer in zip(ran.held_out, answers, strict=True):
        best, *rest = answer.predictions
        right += best["label"] == _label(file)
        runner_up = f"{rest[0]['label']} {rest[0]['probability']:.3f}" if rest else "-"
        table.add_row(file.relative, _label(file), best["label"], f"{best['probability']:.3f}", runner_up)
    table.caption = f"{right} of {len(answers)} right"
    return table


def timing_table(demo_phases: list[Phase], run_phases: dict[str, list[Phase]]) -> Table:
    """The demo's wall time by step, each run's own time by phase under it (`run_phases` by run id)."""
    table = Table(title="Where the demo's time went", title_justify="left", header_style="bold")
    table.add_column("step / phase")
    table.add_column("seconds", justify="right")
    for phase in demo_phases:
        table.add_row(phase.name, f"{phase.seconds:.0f}")
        if phase.name.startswith(RUN_PHASE):
            for part in run_phases.get(phase.name.removeprefix(RUN_PHASE), []):
                table.add_row(f"  {part.name}", f"{part.seconds:.0f}")
    table.add_row("total", f"{sum(p.seconds for p in demo_phases):.0f}", style="bold")
    return table


def _write_digits(folder: Path, limit: int | None, *, console: Console, quiet: bool) -> Path:
    """The digits as JPEGs in label folders, plus the files a user might upload by mistake."""
    written = demo_data.write_digits(folder, limit=limit)
    mistakes = demo_data.write_mistakes(folder)
    if not quiet:
        console.print(
            f"wrote {len(written.files)} digits images in {len(written.per_label)} label folders, "
            f"and {len(mistakes)} files a user might upload by mistake"
        )
    return folder


def demo_parameters(options: DemoOptions, min_new_images: int) -> dict[str, str]:
    """The stack parameters of the demo: the digits' or the photos', MinNewImages the likely images of a
    wave, then the user's own (a MinNewImages among them is what the demo waits for)."""
    base = DEMO_PARAMETERS if options.images is None else PHOTO_PARAMETERS
    return {**base, "MinNewImages": str(max(1, min_new_images)), **dict(options.parameters)}


def _start_stack(
    options: DemoOptions, parameters: dict[str, str]
) -> contextlib.AbstractContextManager[Deployment]:
    """The embedded stack in this process, with the demo's parameters, faults and spot schedule."""
    faults, spot = demo_runtime(list(options.faults), options.interrupt)
    return local.foreground(options.state_dir, parameter_overrides=parameters, faults=faults, spot=spot)


def _upload_in_batches(
    deployment: Deployment, files: list[LocalFile], options: DemoOptions, *, console: Console, quiet: bool
) -> list[str]:
    bucket = deployment.output(names.STACK_OUTPUTS["data_bucket"])
    keys: list[str] = []
    for number, batch in enumerate(demo_data.batches(files, min(options.batches, len(files))), start=1):
        keys += upload_files(deployment.client("s3"), bucket, options.dataset, batch)
        if not quiet:
            console.print(
                f"upload batch {number}: {len(batch)} files to s3://{bucket}/data/{options.dataset}/"
            )
    return keys


def demo_runtime(fault_specs: list[str], interrupt: int) -> tuple[Any, Any]:
    """The fault config and spot schedule objects of the embedded runtime, built from the demo's options."""
    from retrain.embedded.faults import Faults, FaultSpecError
    from retrain.embedded.sagemaker.spot import SpotSchedule

    try:
        faults = Faults.parse(fault_specs)
    except FaultSpecError as error:
        raise UsageError(f"--fault: {error}") from None
    return faults, SpotSchedule(interruptions=interrupt)


def epochs_to_reach(points: list[MetricPoint], target: float) -> int | None:
    """The number of epochs after which a validation metric first reached `target` (None: never)."""
    for point in points:
        if point.value >= target:
            return point.epoch + 1
    return None


def best_curve(facts: RunFacts) -> list[MetricPoint]:
    """The best trial's validation accuracy, epoch by epoch."""
    return facts.curves.get(facts.best_job, {}).get(contract.METRIC_VAL_ACCURACY, [])


def lineage_table(runs_facts: list[RunFacts], target: float = DEMO_TARGET_ACCURACY) -> Table:
    """Each run of the demo: what it started from, its best trial's validation accuracy by epoch, the
    epochs it took to reach `target` and the first run's final accuracy, and its held-out top-1."""
    table = Table(
        title="What each run started from, and the epochs its best trial took to reach an accuracy",
        title_justify="left",
        header_style="bold",
        box=None,
        pad_edge=False,
    )
    first = best_curve(runs_facts[0])
    first_final = first[-1].value if first else None
    for column in ("run", "from", "labels", "val-accuracy by epoch", f"to {target:.2f}"):
        table.add_column(column, no_wrap=True)
    table.add_column("to run 1's" if first_final is None else f"to {first_final:.2f}", no_wrap=True)
    table.add_column("top-1", no_wrap=True)

    def epochs(curve: list[MetricPoint], value: float | None) -> str:
        reached = None if value is None else epochs_to_reach(curve, value)
        return "-" if reached is None else str(reached)

    for facts in runs_facts:
        curve = best_curve(facts)
        top1 = facts.evaluation.top1
        table.add_row(
            facts.run_id,
            facts.started_from.get("kind", "-"),
            str(len(facts.evaluation.labels) or "-"),
            " ".join(f"{p.value:.2f}".removeprefix("0") for p in curve) or "-",
            epochs(curve, target),
            epochs(curve, first_final),
            "-" if top1 is None else f"{top1:.3f}",
        )
    return table
