"""`retrain demo`: the whole flow on the embedded stack, from uploads to a finished run.

It writes the digits (or takes a folder of images), starts the embedded stack with the demo's
parameters, faults and spot schedule, uploads the files in batches, waits for the run the uploads start
(showing how many the ledger has recorded) and follows it to its end. The command in ``cli.py`` reports
on that run; the digits themselves come from :mod:`retrain.demo_data`.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from controller import names, runs
from retrain import demo_data, local
from retrain.deployment import Deployment
from retrain.errors import UsageError
from retrain.follow import follow, wait_for_run
from retrain.timing import Phase
from retrain.upload import LocalFile, check_dataset_name, find_files, likely_images, upload_files

DEMO_DATASET = "digits"
DEMO_BATCHES = 3
DEMO_TIMEOUT_MINUTES = 60
# Template parameters the demo (and `retrain local up`) override so a run finishes in minutes on 2 CPU
# cores: three short spot trials at 32 pixels, the best trial shipped without a final retraining, a short
# quiet period before the run starts, and the price of a CPU instance, which is what really runs here.
# Digits are small subjects: a crop floor of half the image and a learning-rate range for SGD from
# scratch (3 epochs at lr 0.05: val-accuracy 0.75 with the floor at 0.5, 0.44 at ImageNet's 0.08).
# The demo also sets MinNewImages to the number of images it uploads, so the automatic run starts with
# all of them however far the emulated ingest lags behind the uploads (MaxWaitSeconds is the fallback).
DEMO_PARAMETERS = {
    "TrainingInstanceType": "ml.m5.xlarge",
    "Epochs": "3",
    "ImageSize": "32",
    "CropScaleMin": "0.5",
    "LearningRateMin": "0.01",
    "LearningRateMax": "0.2",
    # That learning-rate range suits SGD; AdamW diverges there (its trials ended near chance, 0.16).
    "Optimizers": "sgd",
    "BatchSize": "32",
    "CheckpointEverySteps": "20",
    "FinalTraining": "false",
    "MaxTuningJobs": "3",
    "MaxParallelTuningJobs": "2",
    "ImportPollSeconds": "2",
    "MinNewImages": "1",
    "QuietPeriodSeconds": "15",
    "MaxWaitSeconds": "1800",
}


@dataclass(frozen=True)
class DemoOptions:
    """The demo's command-line options."""

    images: Path | None = None
    dataset: str = DEMO_DATASET
    interrupt: int = 1
    faults: tuple[str, ...] = ()
    limit: int | None = None
    batches: int = DEMO_BATCHES
    timeout_minutes: int = DEMO_TIMEOUT_MINUTES
    state_dir: Path = local.DEFAULT_STATE_DIR


@dataclass(frozen=True)
class DemoRun:
    """A demo's run once it ended, with the stack it ran on (open while the context lasts)."""

    deployment: Deployment
    record: runs.RunRecord
    upload_keys: set[str]
    phases: list[Phase]  # the demo's own, before and around the run: where its wall time went


def check_options(options: DemoOptions) -> None:
    """Refuse options that cannot go together, before anything starts."""
    check_dataset_name(options.dataset)
    if options.images is not None and options.limit is not None:
        raise UsageError("--limit applies to the digits; with --images, put fewer images in the folder")


@contextlib.contextmanager
def run_demo(options: DemoOptions, *, console: Console, quiet: bool) -> Iterator[DemoRun]:
    """Upload, wait for the run the uploads start and follow it; yields it with the stack still up.

    ``quiet`` leaves out the progress lines between steps (the JSON output wants stdout to itself)."""
    check_options(options)
    clock = _Clock()
    with contextlib.ExitStack() as cleanup:
        root = options.images
        if root is None:
            folder = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="retrain-digits-")))
            root = _write_digits(folder, options.limit, console=console, quiet=quiet)
        files = find_files(root)
        clock.lap("write the images")
        deployment = cleanup.enter_context(_start_stack(options, files))
        clock.lap("start the embedded stack")
        since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")
        keys = _upload_in_batches(deployment, files, options, console=console, quiet=quiet)
        clock.lap("upload")
        timeout_seconds = options.timeout_minutes * 60
        progress = ledger_progress(deployment, options.dataset, since, len(keys), console)
        record = wait_for_run(
            deployment,
            options.dataset,
            since=since,
            timeout_seconds=timeout_seconds,
            on_wait=progress,
            poll_seconds=5,
        )
        clock.lap("ingest and wait for the run to start")
        record = follow(
            deployment, record, console=console, live=console.is_terminal, timeout_seconds=timeout_seconds
        )
        clock.lap(RUN_PHASE)
        yield DemoRun(deployment, record, set(keys), clock.phases)


RUN_PHASE = "the run (its phases below)"


class _Clock:
    """Wall-clock laps of the demo's steps."""

    def __init__(self) -> None:
        self.phases: list[Phase] = []
        self._last = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.phases.append(Phase(name, now - self._last))
        self._last = now


def timing_table(demo_phases: list[Phase], run_phases: list[Phase]) -> Table:
    """The demo's wall time by step, the run's own time by phase under it."""
    table = Table(title="Where the demo's time went", title_justify="left", header_style="bold")
    table.add_column("step / phase")
    table.add_column("seconds", justify="right")
    for phase in demo_phases:
        table.add_row(phase.name, f"{phase.seconds:.0f}")
        if phase.name == RUN_PHASE:
            for part in run_phases:
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


def _start_stack(
    options: DemoOptions, files: list[LocalFile]
) -> contextlib.AbstractContextManager[Deployment]:
    """The embedded stack in this process, with the demo's parameters, faults and spot schedule."""
    faults, spot = demo_runtime(list(options.faults), options.interrupt)
    parameters = {**DEMO_PARAMETERS, "MinNewImages": str(max(1, len(likely_images(files))))}
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


def ledger_progress(
    deployment: Deployment, dataset: str, since: str, total: int, console: Console
) -> Callable[[], None]:
    """While the demo waits for its run: how many of its uploads the control plane has recorded so far
    (a COUNT query, so the wait adds little load to the stack it waits on)."""
    last = -1
    dynamodb = deployment.client("dynamodb")
    table = deployment.output(names.STACK_OUTPUTS["ledger_table"])

    def show() -> None:
        nonlocal last
        recorded = 0
        for page in dynamodb.get_paginator("query").paginate(
            TableName=table,
            KeyConditionExpression="#pk = :dataset",
            FilterExpression="recorded_at >= :since",
            ExpressionAttributeNames={"#pk": names.LEDGER_PK},
            ExpressionAttributeValues=runs.serialize({":dataset": dataset, ":since": since}),
            Select="COUNT",
        ):
            recorded += int(page.get("Count", 0))
        if recorded != last:
            console.print(f"waiting for the run: {recorded} of {total} uploads recorded in the ledger")
            last = recorded

    return show


def demo_runtime(fault_specs: list[str], interrupt: int) -> tuple[Any, Any]:
    """The fault config and spot schedule objects of the embedded runtime, built from the demo's options."""
    from retrain.embedded.faults import Faults, FaultSpecError
    from retrain.embedded.sagemaker.spot import SpotSchedule

    try:
        faults = Faults.parse(fault_specs)
    except FaultSpecError as error:
        raise UsageError(f"--fault: {error}") from None
    return faults, SpotSchedule(interruptions=interrupt)
