"""One training epoch and one evaluation pass, in the shape of torchvision's classification reference.

`train_one_epoch` runs from any batch of an epoch (a resumed job starts mid-epoch), calls back
after every optimizer step (checkpoints, interruption, profiling) and prints metric lines.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from retrain_contract import container as contract
from retrain_training import distributed, models
from retrain_training.loaders import Loader

LOG_EVERY_STEPS = 10  # train-loss lines between epoch ends


@dataclass
class Progress:
    """Where training stands: the next batch to train is `next_batch` of `epoch`."""

    epoch: int = 0
    next_batch: int = 0
    step: int = 0  # optimizer steps taken in the whole job


@dataclass(frozen=True)
class Optimization:
    """What a step updates besides the weights, and a checkpoint carries with them: the optimizer,
    its learning-rate schedule, the mixed-precision loss scaler, and whether steps run in autocast."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    use_amp: bool = False
    amp_dtype: torch.dtype = torch.float16
    memory_format: torch.memory_format = torch.contiguous_format  # the batches', as the model's


@dataclass
class EpochResult:
    loss: float
    images: int
    seconds: float


def emit(name: str, value: float, *, epoch: int, step: int, context: distributed.Context) -> None:
    if context.is_main:
        print(contract.format_metric(name, value, epoch=epoch, step=step), flush=True)


def train_one_epoch(  # noqa: PLR0913  # keyword-only, each a part of the step
    *,
    model: nn.Module,
    loss_fn: nn.Module,
    optimization: Optimization,
    loader: Loader,
    progress: Progress,
    context: distributed.Context,
    frozen_statistics: bool = False,
    before_backward: Callable[[], None] | None = None,
    after_step: Callable[[Progress, float, float], None] | None = None,
) -> EpochResult:
    """Train the rest of `progress.epoch`; `before_backward()` runs between each step's forward and its
    backward (the Debugger hook records the loss scale), `after_step(progress, data_wait_s, compute_s)`
    follows every step (it may checkpoint, or raise checkpoints.Interrupted to stop)."""
    models.train_mode(model, frozen_statistics=frozen_statistics)
    device = context.device
    optimizer, scaler = optimization.optimizer, optimization.scaler
    epoch = progress.epoch
    # The losses add up on the device: reading one back each step (.cpu()) would make the host wait
    # for the GPU every step, so it could never queue the next step's kernels while this one runs.
    total = torch.zeros((), dtype=torch.float64, device=device)
    window = torch.zeros((), dtype=torch.float64, device=device)
    steps = images_seen = window_steps = 0
    started = waited_from = time.perf_counter()
    for batch_images, batch_labels in loader.epoch(epoch, start_batch=progress.next_batch):
        data_wait = time.perf_counter() - waited_from
        computed_from = time.perf_counter()
        images = batch_images.to(device, non_blocking=True, memory_format=optimization.memory_format)
        labels = batch_labels.to(device, non_blocking=True)
        with torch.autocast(
            device_type=device.type, dtype=optimization.amp_dtype, enabled=optimization.use_amp
        ):
            loss = loss_fn(model(images), labels)
        if before_backward is not None:
            before_backward()
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimization.scheduler.step()
        value = loss.detach().to(torch.float64)
        total += value
        window += value
        window_steps += 1
        steps += 1
        images_seen += images.shape[0] * context.world_size
        progress.next_batch += 1
        progress.step += 1
        if progress.step % LOG_EVERY_STEPS == 0:
            mean = distributed.all_reduce_sum([float(window) / window_steps], context)[0] / context.world_size
            emit(contract.METRIC_TRAIN_LOSS, mean, epoch=epoch, step=progress.step, context=context)
            window.zero_()
            window_steps = 0
        compute = time.perf_counter() - computed_from
        if after_step is not None:
            after_step(progress, data_wait, compute)
        waited_from = time.perf_counter()
    mean_loss = float(total) / steps if steps else float("nan")
    if steps:
        mean_loss = distributed.all_reduce_sum([mean_loss], context)[0] / context.world_size
        emit(contract.METRIC_TRAIN_LOSS, mean_loss, epoch=epoch, step=progress.step, context=context)
    return EpochResult(mean_loss, images_seen, time.perf_counter() - started)


@dataclass
class Evaluation:
    loss: float
    top1: float
    top3: float
    samples: int


def evaluate(
    model: nn.Module,
    loss_fn: nn.Module,
    loader: Loader,
    context: distributed.Context,
    *,
    use_amp: bool,
    amp_dtype: torch.dtype = torch.float16,
    memory_format: torch.memory_format = torch.contiguous_format,
) -> Evaluation:
    """Loss, top-1 and top-3 accuracy over the whole validation set (summed over ranks)."""
    model.eval()
    sums = [0.0, 0.0, 0.0, 0.0]  # loss * n, top-1 hits, top-3 hits, n
    with torch.inference_mode():
        for batch_images, batch_labels in loader.epoch(0):
            images = batch_images.to(context.device, non_blocking=True, memory_format=memory_format)
            labels = batch_labels.to(context.device, non_blocking=True)
            with torch.autocast(device_type=context.device.type, dtype=amp_dtype, enabled=use_amp):
                logits = model(images)
            logits = logits.float()
            n = labels.shape[0]
            sums[0] += float(loss_fn(logits, labels)) * n
            k = min(3, logits.shape[1])
            top = logits.topk(k, dim=1).indices
            sums[1] += float((top[:, 0] == labels).sum())
            sums[2] += float((top == labels[:, None]).any(dim=1).sum())
            sums[3] += n
    loss_sum, top1, top3, count = distributed.all_reduce_sum(sums, context)
    if count == 0:
        return Evaluation(float("nan"), float("nan"), float("nan"), 0)
    return Evaluation(loss_sum / count, top1 / count, top3 / count, int(count))


def unwrap(model: nn.Module) -> nn.Module:
    """The module under a DistributedDataParallel wrapper (its state_dict keys have no `module.`)."""
    inner: nn.Module = getattr(model, "module", model)
    return inner
