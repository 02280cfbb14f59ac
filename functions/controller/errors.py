"""The control plane's errors. Each class name is the Error a Step Functions Catch or Retry matches
(the Lambda runtime reports `errorType` = the class name), and each message says what to do."""

from __future__ import annotations


class ControllerError(Exception):
    """Base of every error the Lambdas raise on purpose."""


class ConfigurationError(ControllerError):
    """An environment variable of the function is missing or malformed (a deployment fault)."""


class InvalidRunInputError(ControllerError):
    """The execution input is not a valid run request."""


class DatasetBusyError(ControllerError):
    """Another run of the data set is active; runs of one data set never overlap."""


class NotEnoughDataError(ControllerError):
    """The data set has too few images or labels to train a classifier."""


class ImportFailedError(ControllerError):
    """The FSx data repository task that imports new images failed."""


class JobOutputMissingError(ControllerError):
    """A SageMaker job finished without the output file its next state reads."""


class RuleEvaluationsInProgressError(ControllerError):
    """Managed Debugger is still evaluating a rule of the final training job; the state machine retries."""
