"""The Debugger hook: losses and gradient/weight summaries saved as smdebug tensors at an interval.

On SageMaker with managed Debugger the service writes `<base>/input/config/debughookconfig.json`
(DebugHookConfig: S3 output path, local path, collections, intervals) and the hook follows it.
Everywhere else the hook writes to `paths.tensors_dir` (under SM_OUTPUT_DATA_DIR, so it ships in
output.tar.gz) and `rule_check.py` evaluates the rules over it after the job.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from retrain_contract import container as contract

if TYPE_CHECKING:
    from smdebug.pytorch import Hook
else:
    Hook = Any

log = logging.getLogger(__name__)
DEBUG_HOOK_CONFIG_FILE = "debughookconfig.json"  # written by SageMaker from DebugHookConfig
MANAGED_OUT_DIR = contract.DEBUG_HOOK_LOCAL_PATH  # smdebug's out_dir when DebugHookConfig names no LocalPath
# What smdebug leaves in its out_dir besides the tensors: the end-of-training marker (written when a
# hook closes, at exit too, unless TRAINING_JOB_NAME is set) makes a new hook refuse the directory;
# the claim file (removed when a hook closes) makes a new hook silently write nothing.
END_OF_TRAINING_FILE = "training_job_end.ts"
CLAIM_FILE = "claim.smd"
DEFAULT_INTERVAL = int(str(contract.HYPERPARAMETER_DEFAULTS[contract.HP_DEBUG_INTERVAL]))

# Summaries instead of whole tensors keep the cost and the output small, and the rules need no more:
# a NaN or inf anywhere in a tensor makes its abs mean and L2 norm non-finite, and a vanishing
# gradient shows in its abs mean. Each extra reduction is another tensor written per parameter.
GRADIENT_ABS_REDUCTIONS = ("mean",)
GRADIENT_NORMS = ("l2",)
WEIGHT_NORMS = ("l2",)
# Which parameters: the weight matrices and kernels (every parameter of two or more dimensions: the
# convolutions and the classifier), not the biases and batch-norm scales and shifts. The gradient rules
# watch these layers; leaving out the 41 one-dimensional tensors of a ResNet-18 cuts what one save
# writes by ~60% (smdebug writes every reduction as its own protobuf event, in pure Python under the
# protobuf 3.20 it needs). Managed Debugger's DebugHookConfig, when present, decides for itself.
COLLECTION_LOSSES = "losses"
COLLECTION_GRADIENTS = "gradients"
COLLECTION_WEIGHTS = "weights"
COLLECTIONS = (COLLECTION_LOSSES, COLLECTION_GRADIENTS, COLLECTION_WEIGHTS)
# float16 training's loss scale at the steps that save gradients: those are the scaled loss's gradients,
# and the VanishingGradient rule divides them by it (rules.tensors.LOSS_SCALE reads this name).
COLLECTION_LOSS_SCALE = "loss_scale"
# The fewest saves a job gets whatever its length: of gradients and weights, so VanishingGradient judges
# more than the first step and LossNotDecreasing can see whether the weights moved; of training losses, so
# LossNotDecreasing has its MIN_LOSSES (6) and a window of 3 at the end. A job of 30 steps saves its
# gradients every 6 steps, not only at step 0 of 50.
MIN_TENSOR_SAVES = 5
MIN_LOSS_SAVES = 8


def save_intervals(requested: int, total_steps: int) -> tuple[int, int]:
    """The steps between saves of (gradients and weights, training losses): `requested` (debug-interval)
    and DEBUG_LOSS_INTERVAL at most, shorter for a job of `total_steps` too short for the fewest saves
    above (0: unknown), the first a multiple of the second."""
    losses = min(requested, contract.DEBUG_LOSS_INTERVAL)
    tensors = requested
    if total_steps > 0:
        losses = max(1, min(losses, total_steps // MIN_LOSS_SAVES))
        tensors = max(1, min(requested, total_steps // MIN_TENSOR_SAVES))
    # a multiple of the losses' interval: every save of gradients has its step's loss beside it
    return max(losses, tensors - tensors % losses), losses


def hook_config_path(paths: contract.Paths) -> Path:
    return paths.base / "input" / "config" / DEBUG_HOOK_CONFIG_FILE


def build_hook(out_dir: Path, interval: int, total_steps: int = 0) -> Hook:
    """A hook saving training losses every `interval` steps (at most DEBUG_LOSS_INTERVAL) and every
    evaluation step (validation batches are few and the Overfit rule needs them all), and gradient and
    weight summaries every `interval` training steps; both more often in a job of `total_steps` too short
    for the fewest saves (save_intervals)."""
    if interval < 1:
        raise ValueError(f"debug-interval must be a positive number of steps, got {interval}")
    from smdebug import modes
    from smdebug.core.reduction_config import ReductionConfig
    from smdebug.core.save_config import SaveConfig, SaveConfigMode
    from smdebug.pytorch import Hook as SmdebugHook

    tensor_interval, loss_interval = save_intervals(interval, total_steps)
    hook = SmdebugHook(
        out_dir=str(out_dir),
        save_config=SaveConfig(save_interval=tensor_interval),
        include_collections=list(COLLECTIONS),
    )
    gradients = hook.get_collection(COLLECTION_GRADIENTS)
    gradients.reduction_config = ReductionConfig(
        abs_reductions=list(GRADIENT_ABS_REDUCTIONS), norms=list(GRADIENT_NORMS)
    )
    weights = hook.get_collection(COLLECTION_WEIGHTS)
    weights.reduction_config = ReductionConfig(norms=list(WEIGHT_NORMS))
    losses = hook.get_collection(COLLECTION_LOSSES)
    losses.reduction_config = ReductionConfig(save_raw_tensor=True)
    losses.save_config = {
        modes.TRAIN: SaveConfigMode(save_interval=loss_interval),
        modes.EVAL: SaveConfigMode(save_interval=1),
    }
    scale = hook.get_collection(COLLECTION_LOSS_SCALE)
    scale.add_tensor_name(COLLECTION_LOSS_SCALE)
    scale.reduction_config = ReductionConfig(save_raw_tensor=True)
    return hook


@dataclass(frozen=True)
class Position:
    """Where a job's hook starts: the training steps and validation batches its earlier runs took (up to
    the checkpoint it resumes from). Both count as hook steps, so a resumed hook's step numbers, global
    and per mode, go on exactly as an uninterrupted run's would."""

    train_steps: int = 0
    eval_steps: int = 0

    @property
    def global_step(self) -> int:
        return self.train_steps + self.eval_steps


def out_dir(paths: contract.Paths) -> Path:
    """Where the hook writes: DebugHookConfig's LocalPath in managed mode, else paths.tensors_dir."""
    config = hook_config_path(paths)
    if not config.is_file():
        return paths.tensors_dir
    return Path(json.loads(config.read_text(encoding="utf-8")).get("LocalPath") or MANAGED_OUT_DIR)


def keep_steps_before(directory: Path, step: int) -> None:
    """Make the tensors an earlier run of this job left in `directory` the start of this run's.

    A restart (spot, or the container run again in the same /opt/ml) resumes from a checkpoint taken
    at hook step `step`: the steps before it stay, they are this job's history; the steps from it on
    are dropped, because this run saves them again, from the same state. The rules then read one
    directory that holds what an uninterrupted run's would. smdebug's end-of-training marker and claim
    file go too: with them a new hook refuses the directory, or writes nothing into it.
    """
    if not directory.is_dir():
        return
    (directory / END_OF_TRAINING_FILE).unlink(missing_ok=True)
    (directory / CLAIM_FILE).unlink(missing_ok=True)
    dropped = 0
    for step_dir in (directory / "events").glob("*"):
        if step_dir.name.isdigit() and int(step_dir.name) >= step:
            shutil.rmtree(step_dir)
            dropped += 1
    for index_file in (directory / "index").glob("*/*.json"):
        number = index_file.name.split("_", 1)[0]
        if number.isdigit() and int(number) >= step:
            index_file.unlink()
    if dropped:
        log.info(
            "dropped %d saved steps from step %d on in %s: this run saves them again",
            dropped,
            step,
            directory,
        )


def attach(
    model: torch.nn.Module,
    loss_fn: torch.nn.Module,
    args: argparse.Namespace,
    paths: contract.Paths,
    start: Position | None = None,
    total_steps: int = 0,
) -> Hook | None:
    """Register a hook on the model and the loss, starting at `start` (a resumed job's position) in
    whatever an earlier run left in its directory, for a job of `total_steps` training steps (0: not
    known); None when the debug-hook hyperparameter is off."""
    if not contract.parse_bool(getattr(args, "debug_hook", True)):
        return None
    start = start or Position()
    keep_steps_before(out_dir(paths), start.global_step)
    config = hook_config_path(paths)
    if config.is_file():
        from smdebug.pytorch import Hook as SmdebugHook

        hook = SmdebugHook.create_from_json_file(str(config))
    else:
        interval = int(getattr(args, "debug_interval", DEFAULT_INTERVAL))
        hook = build_hook(paths.tensors_dir, interval, total_steps)
        watch_weight_tensors(hook, model)
    register_lean(hook, model)
    hook.register_loss(loss_fn)
    train_mode(hook)
    resume_at(hook, start)
    return hook


def watch_weight_tensors(hook: Hook, model: torch.nn.Module) -> None:
    """Limit the gradients and weights collections to the model's parameters of 2+ dimensions, under
    the names smdebug gives them (`<model class>_<parameter>`, gradients prefixed `gradient/`)."""
    prefix = model._get_name()
    names = "|".join(re.escape(f"{prefix}_{n}") for n, p in model.named_parameters() if p.dim() > 1)
    hook.get_collection(COLLECTION_GRADIENTS).include_regex = [f"^gradient/({names})$"]
    hook.get_collection(COLLECTION_WEIGHTS).include_regex = [f"^({names})$"]


def register_lean(hook: Hook, model: torch.nn.Module) -> None:
    """smdebug's `register_module` without its per-layer forward hooks.

    Those hooks time every layer for smdebug's framework profiler and save layer outputs; retrain
    collects neither, and one Python call per layer per step is most of the hook's cost when a GPU
    step takes milliseconds. Weights are still saved from the model's pre-forward hook, gradients
    from the parameter hooks, losses from the loss module (smdebug 1.0.34's own registration steps).

    The two model hooks run outside any compiled region (torch.compiler.disable, PyTorch's "Disabling
    and suppressing errors" for code Dynamo should not trace): they read and bump the hook's step count,
    and traced, Dynamo guarded on it and compiled the forward again at every step up to its limit.
    """
    for name, submodule in model.named_modules():
        submodule._module_name = name
        hook.module_set.add(submodule)
    model._module_name = model._get_name()
    model.register_forward_pre_hook(torch.compiler.disable(hook.forward_pre_hook))
    model.register_forward_hook(torch.compiler.disable(hook.fhook))
    hook._backward_apply(model)
    hook.has_registered_module = True
    hook.count_parameters(model)


def loss_scale_recorder(hook: Hook | None, scaler: torch.amp.GradScaler) -> Callable[[], None] | None:
    """A call for each training step between its forward and its backward that saves the loss scale
    where the hook saves this step's gradients (a host read of the scale every debug-interval steps, as
    the gradients' own); None when there is nothing to record: no hook, no loss scaler (float32,
    bfloat16), or a hook of managed Debugger's DebugHookConfig, whose rules are AWS's."""
    if hook is None or not scaler.is_enabled():
        return None
    if COLLECTION_LOSS_SCALE not in hook.collection_manager.get_collections():
        return None
    from smdebug import modes

    gradients = hook.get_collection(COLLECTION_GRADIENTS)

    def record() -> None:
        if gradients.save_config.should_save_step(modes.TRAIN, hook.mode_steps[modes.TRAIN]):
            scale = np.array([scaler.get_scale()], dtype=np.float64)
            hook.save_tensor(COLLECTION_LOSS_SCALE, scale, collections_to_write=COLLECTION_LOSS_SCALE)

    return record


def train_mode(hook: Hook | None) -> None:
    """Mark the following forward passes as training steps (call before each training epoch)."""
    if hook is not None:
        from smdebug import modes

        hook.set_mode(modes.TRAIN)


def eval_mode(hook: Hook | None) -> None:
    """Mark the following forward passes as validation steps: the Overfit rule compares these."""
    if hook is not None:
        from smdebug import modes

        hook.set_mode(modes.EVAL)


def resume_at(hook: Hook | None, start: Position) -> None:
    """Continue the step counts of a resumed job so its tensors follow the earlier ones: the global
    step counts every forward pass, training and validation; each mode counts its own."""
    if hook is None or start.global_step <= 0:
        return
    from smdebug import modes

    # The PyTorch hook counts from init_step (-1) and increments before each step's first forward.
    before = start.global_step - 1
    hook.init_step = before
    hook.step = before
    hook.mode_steps[modes.GLOBAL] = before
    hook.mode_steps[modes.TRAIN] = start.train_steps - 1
    hook.mode_steps[modes.EVAL] = start.eval_steps - 1


def close(hook: Hook | None) -> None:
    """Flush and close the tensor files; marks the trial complete for the rules."""
    if hook is not None:
        hook.close()
