"""The CLI's errors: each says what went wrong and what to do, and maps to one exit code.

Commands raise these; the CLI's boundary (`retrain.commands._shared.Group`) turns them into one line on
stderr and the exit code, so a person never sees a traceback for a mistake they can fix.
"""

from __future__ import annotations


class RetrainError(Exception):
    """A failure the user can act on; `str()` is the whole message."""

    exit_code = 1


class UsageError(RetrainError):
    """Bad input: a dataset name, a folder, an override."""

    exit_code = 2


class EmptyFolderError(UsageError):
    pass


class BadDatasetNameError(UsageError):
    pass


class NoCredentialsError(RetrainError):
    exit_code = 3


class StackNotFoundError(RetrainError):
    exit_code = 4


class RunNotFoundError(RetrainError):
    exit_code = 5


class RunFailedError(RetrainError):
    """The run ended in a failed state (the gate rejecting a model is not a failure)."""

    exit_code = 6


class EmbeddedRuntimeError(RetrainError):
    """The embedded AWS emulation could not start or is not there."""

    exit_code = 7


class PreflightBindsError(RetrainError):
    """`retrain preflight` found a quota or a missing resource type that will bind."""

    exit_code = 8
