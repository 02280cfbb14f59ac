"""Jobs through the container start: what SageMaker's start of the image does to a job."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from retrain.embedded.sagemaker import INTERRUPTIONS_FIELD, SageMakerEmulator, SpotSchedule
from retrain.embedded.sagemaker.image import ContainerImage

from .conftest import put_images, training_request, wait_training
from .test_spot import spot_request


def test_a_requirements_file_in_the_code_directory_fails_an_isolated_job_as_on_sagemaker(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator], image: ContainerImage
) -> None:
    # GIVEN an image whose /opt/ml/code holds a requirements.txt (as `COPY training_image/ /opt/ml/code/`
    # put it there), and a job with network isolation
    (image.code_dir / "requirements.txt").write_text("tomli-w==1.2.0\n")
    put_images(aws["s3"], "data/train")
    emulator = make_emulator(image=image)

    # WHEN the job runs
    emulator.create_training_job(**training_request("reqs", EnableNetworkIsolation=True))
    job = wait_training(emulator, "reqs")

    # THEN the SageMaker training toolkit tried to pip-install it before the script, with no index to reach
    assert job["TrainingJobStatus"] == "Failed"
    assert job["FailureReason"].startswith("AlgorithmError: InstallRequirementsError"), job["FailureReason"]


def test_an_entrypoint_that_does_not_pass_sigterm_on_loses_the_interruption_checkpoint(
    aws: dict[str, Any], make_emulator: Callable[..., SageMakerEmulator], image: ContainerImage
) -> None:
    # GIVEN the image with the toolkit's `train` as its first process (as the DLC's bash entry script runs
    # it), and a spot market that reclaims the job after its first checkpoint
    put_images(aws["s3"], "data/train")
    toolkit_first = dataclasses.replace(image, entrypoint=("train",))
    emulator = make_emulator(
        image=toolkit_first,
        grace_seconds=1.0,
        spot=SpotSchedule(interruptions=1, after_checkpoints=1, capacity_wait_seconds=0.2),
    )

    # WHEN the job is interrupted
    emulator.create_training_job(**spot_request("no-forward", **{"checkpoint-every-steps": "3"}))
    job = wait_training(emulator, "no-forward")

    # THEN the script never heard SIGTERM: the container was killed after the grace, and the job resumed
    # from the last periodic checkpoint, not from the step it was in
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    first = (emulator.workdir / "training" / "no-forward" / "logs" / "attempt-1.log").read_text()
    assert "interrupted at step" not in first
    assert job[INTERRUPTIONS_FIELD][0]["NewestCheckpointStep"] % 3 == 0
