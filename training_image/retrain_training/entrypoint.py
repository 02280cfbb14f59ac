"""The training image's ENTRYPOINT: the container's first process (PID 1).

SageMaker starts a training container as `<image> train` and stops it (StopTrainingJob, a time limit,
a managed spot reclaim) by sending SIGTERM to PID 1 only, SIGKILL after a grace period. The SageMaker
training toolkit (`sagemaker_training.trainer.train`) runs the entry script as its child and does not
pass that SIGTERM on, so a script that checkpoints on SIGTERM never hears it (aws/sagemaker-training-
toolkit issues 125 and 173). Here PID 1 runs the toolkit in-process and sends a stop signal on to its
children: the script finishes its step, checkpoints and exits, and the toolkit reports as usual.

Any other command (`<image> bash`, a ContainerEntrypoint that names this module with other arguments)
is executed as it is.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType

import psutil

TRAIN_COMMAND = "train"
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def forward_to_children(signum: int, _frame: FrameType | None) -> None:
    """Send the signal on to this process's children (the entry script the toolkit started). Before
    the script has started there is nothing to checkpoint: the container ends as the signal asks."""
    children = psutil.Process().children()
    if not children:
        os._exit(128 + signum)
    for child in children:
        try:
            child.send_signal(signum)
        except psutil.NoSuchProcess:
            continue


def main(argv: Sequence[str] | None = None) -> int:
    command = list(sys.argv[1:] if argv is None else argv)
    if not command:
        print(
            f"usage: the image runs `{TRAIN_COMMAND}` (SageMaker training) or the command it is given",
            file=sys.stderr,
        )
        return 2
    if command != [TRAIN_COMMAND]:
        os.execvp(command[0], command)
    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward_to_children)
    from sagemaker_training import trainer

    trainer.train()  # exits with the toolkit's status
    return 0


if __name__ == "__main__":
    sys.exit(main())
