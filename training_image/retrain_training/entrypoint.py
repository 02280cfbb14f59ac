"""The training image's ENTRYPOINT: the container's first process (PID 1).

SageMaker starts a training container as `<image> train` and stops it (StopTrainingJob, a time limit,
a managed spot reclaim) by sending SIGTERM to PID 1 only, SIGKILL after a grace period. The SageMaker
training toolkit (`sagemaker_training.trainer.train`) runs the entry script as its child and does not
pass that SIGTERM on, so a script that checkpoints on SIGTERM never hears it (aws/sagemaker-training-
toolkit issues 125 and 173). Here PID 1 runs the toolkit in-process and sends a stop signal on to its
children: the script finishes its step, checkpoints and exits, and the toolkit reports as usual.

Any other command (`<image> bash`, a ContainerEntrypoint that names this module with other arguments)
is executed as it is.

Before it starts the script the toolkit lists smdebug's exception classes (the lines of a failure's output
start at one of their names) with `from smdebug import exceptions`, which runs smdebug's package
`__init__` and imports torch into PID 1: 1.3 s of CPU at every container start, for a list of names. PID 1
reads the same names from that module without the package's `__init__`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import signal
import sys
from collections.abc import Sequence
from inspect import isclass
from types import FrameType, ModuleType

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


def debugger_exception_names() -> list[object]:
    """The classes `sagemaker_training.process.get_debugger_exception_classes` lists: the class names in
    smdebug.exceptions (its default error class when smdebug is absent or USE_SMDEBUG is 0), imported
    under a bare `smdebug` package so that smdebug's `__init__` (and torch) stay out of this process."""
    from sagemaker_training import process

    spec = importlib.util.find_spec("smdebug")
    if os.environ.get("USE_SMDEBUG") == "0" or spec is None or not spec.submodule_search_locations:
        return [process.DEFAULT_ERROR_CLASS]
    saved = {name: module for name, module in sys.modules.items() if name.split(".")[0] == "smdebug"}
    bare = ModuleType("smdebug")
    bare.__path__ = list(spec.submodule_search_locations)
    sys.modules["smdebug"] = bare
    try:
        exceptions = importlib.import_module("smdebug.exceptions")
        names: list[object] = [name for name in dir(exceptions) if isclass(getattr(exceptions, name))]
    finally:
        for name in [name for name in sys.modules if name.split(".")[0] == "smdebug"]:
            del sys.modules[name]
        sys.modules.update(saved)
    return names or [process.DEFAULT_ERROR_CLASS]


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
    from sagemaker_training import process, trainer

    names = debugger_exception_names()
    process.get_debugger_exception_classes = lambda: list(names)
    trainer.train()  # exits with the toolkit's status
    return 0


if __name__ == "__main__":
    sys.exit(main())
