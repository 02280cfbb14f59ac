"""SageMaker training entry point (SAGEMAKER_PROGRAM=train.py): transfer-learn a ResNet classifier.

Hyperparameters arrive as command-line flags (script mode), paths from the SM_* environment
(contract.resolve_paths). One process of a data-parallel job when `launch` started one per GPU (or
torchrun, mpirun or SM_HOSTS describe several). Resumes from the newest valid checkpoint of this job,
which rank 0 reads from the first host's directory and sends to every rank; on SIGTERM finishes the
step, checkpoints and exits with contract.INTERRUPTED_EXIT_CODE; on any error writes the reason to
<base>/output/failure (the first reason, when several processes share the host) and exits non-zero.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import pathlib
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psutil
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from retrain_contract import container as contract
from retrain_training import (
    augment,
    batching,
    checkpoints,
    data,
    debugger,
    distributed,
    engine,
    loaders,
    models,
    profiler,
    serving,
)

log = logging.getLogger("train")
CHECKPOINT_VERSION = 1
# The job's phases (profiler.PhaseClock) inside the epoch loop that are not its training steps.
PHASE_FIRST_STEP = "first step"
PHASE_VALIDATION = "validation"
PHASE_CHECKPOINTS = "checkpoints"
LOOP_PHASES = (PHASE_FIRST_STEP, PHASE_VALIDATION, PHASE_CHECKPOINTS)


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for spec in contract.HYPERPARAMETERS:
        kind: Any = contract.parse_bool if spec.type is bool else spec.type
        parser.add_argument(
            f"--{spec.name}", type=kind, default=spec.default, choices=spec.choices, help=spec.help
        )
    return parser


def validate_args(args: argparse.Namespace) -> None:
    """Each hyperparameter at or above the contract's minimum for it, and a valid crop scale."""
    for spec in contract.HYPERPARAMETERS:
        value = getattr(args, spec.name.replace("-", "_"))
        if spec.minimum is not None and value < spec.minimum:
            raise ValueError(f"hyperparameter {spec.name} must be at least {spec.minimum}, got {value}")
    augment.check_crop_scale_min(args.crop_scale_min)
    if args.batchnorm == contract.BATCHNORM_FROZEN and not args.pretrained:
        raise ValueError(
            f"hyperparameter batchnorm={contract.BATCHNORM_FROZEN} keeps the statistics of the weights a job "
            f"starts from, and this one starts from random weights: set pretrained, or batchnorm="
            f"{contract.BATCHNORM_TRAIN}"
        )


def configure_determinism(seed: int, device: torch.device) -> None:
    """Same seed, same results: bit for bit on CPU; on GPU cuDNN autotuning is kept for speed."""
    torch.manual_seed(seed)
    if device.type == "cpu":
        torch.use_deterministic_algorithms(True)


def learning_rate(args: argparse.Namespace) -> float:
    """lr, or with lr-reference-batch set, lr scaled linearly from that batch size to batch-size (Goyal
    et al., "Accurate, Large Minibatch SGD"): a batch sized for a larger GPU keeps the recipe's step per
    image. Every trial of a tuning job has the same batch size, so trials still compare like with like."""
    if not args.lr_reference_batch:
        return float(args.lr)
    return float(args.lr * args.batch_size / args.lr_reference_batch)


def parameter_groups(args: argparse.Namespace, model: nn.Module) -> Any:
    """All parameters at lr, or with backbone-lr-factor != 1 the backbone at lr x factor (fine-tuning)."""
    if args.backbone_lr_factor == 1.0:
        return model.parameters()
    head = models.head_prefix(engine.unwrap(model))
    named = list(engine.unwrap(model).named_parameters())
    return [
        {"params": [p for n, p in named if n.startswith(head)]},
        {
            "params": [p for n, p in named if not n.startswith(head)],
            "lr": learning_rate(args) * args.backbone_lr_factor,
        },
    ]


def build_optimizer(args: argparse.Namespace, model: nn.Module) -> torch.optim.Optimizer:
    groups = parameter_groups(args, model)
    lr = learning_rate(args)
    if args.lr_reference_batch:
        log.info("lr %g for batch %d (%g at batch %d)", lr, args.batch_size, args.lr, args.lr_reference_batch)
    if args.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=lr, weight_decay=args.weight_decay)
    return torch.optim.SGD(groups, lr=lr, momentum=args.momentum, weight_decay=args.weight_decay)


def resolve_amp_dtype(name: str, device: torch.device) -> torch.dtype:
    """amp-dtype as a torch dtype; `auto` is bfloat16 where the device computes it natively (CPUs, and
    GPUs from Ampere on: A10G, A100, H100), else float16 (T4, V100). bfloat16 has float32's range, so it
    needs no loss scaler, whose step reads a value back to the host every step (PyTorch's AMP docs,
    "Gradient Scaling"; GradScaler.step's .item() unless the optimizer is fused)."""
    if name != contract.AMP_DTYPE_AUTO:
        dtype: torch.dtype = getattr(torch, name)
        return dtype
    if device.type == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
        return torch.float16
    return torch.bfloat16


def build_optimization(
    args: argparse.Namespace, model: nn.Module, *, steps_per_epoch: int
) -> engine.Optimization:
    """The optimizer, a cosine schedule over the whole job, mixed precision (on CUDA, and on a CPU with
    amp-on-cpu; float16 with a loss scaler, bfloat16 without one: its range is float32's) and the
    batches' memory format."""
    device = next(model.parameters()).device
    use_amp = args.amp and (device.type == "cuda" or args.amp_on_cpu)
    amp_dtype = resolve_amp_dtype(args.amp_dtype, device)
    optimizer = build_optimizer(args, model)
    return engine.Optimization(
        optimizer=optimizer,
        scheduler=torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * steps_per_epoch),
        scaler=torch.amp.GradScaler(device.type, enabled=use_amp and amp_dtype == torch.float16),
        use_amp=use_amp,
        amp_dtype=amp_dtype,
        memory_format=torch.channels_last if args.channels_last else torch.contiguous_format,
    )


def checkpoint_state(
    *,
    args: argparse.Namespace,
    model: nn.Module,
    optimization: engine.Optimization,
    loader: batching.Loader,
    progress: engine.Progress,
    labels: list[str],
    order: list[int],
) -> dict[str, Any]:
    return {
        "version": CHECKPOINT_VERSION,
        "arch": args.model,
        "labels": labels,
        "image_size": args.image_size,
        "step": progress.step,
        "epoch": progress.epoch,
        "next_batch": progress.next_batch,
        "order": torch.tensor(order, dtype=torch.int64),
        "model": engine.unwrap(model).state_dict(),
        "optimizer": optimization.optimizer.state_dict(),
        "scheduler": optimization.scheduler.state_dict(),
        "scaler": optimization.scaler.state_dict(),
        "rng": checkpoints.rng_state(),
        "loader": loader.state_dict(),
        "args": vars(args),
    }


MAX_SKIPPED_LISTED = 1000


def _channel_key(path: str, paths: contract.Paths) -> str:
    """A skipped file as the manifest names it (<label>/<file>), not as this container mounted it."""
    root = paths.channel(contract.CHANNEL_TRAIN)
    if root is None:
        return path
    try:
        return pathlib.Path(path).relative_to(root).as_posix()
    except ValueError:
        return path


def write_model(
    paths: contract.Paths,
    args: argparse.Namespace,
    model: nn.Module,
    labels: list[str],
    summary: dict[str, Any],
) -> None:
    """model.pt (state_dict + arch + labels), labels.json, config.json and the inference handler's code/
    (serving.write_code: model.tar.gz is then a deployable model), only in SM_MODEL_DIR."""
    paths.model_dir.mkdir(parents=True, exist_ok=True)
    artifact = {
        "arch": args.model,
        "labels": labels,
        "image_size": args.image_size,
        # NCHW whatever the training's memory format: the model's consumers see one layout
        "state_dict": {k: v.contiguous() for k, v in engine.unwrap(model).state_dict().items()},
    }
    torch.save(artifact, paths.model_dir / contract.MODEL_FILE)
    (paths.model_dir / contract.LABELS_FILE).write_text(json.dumps(labels, indent=2) + "\n", encoding="utf-8")
    config = {
        "hyperparameters": {
            name: getattr(args, name.replace("-", "_")) for name in contract.HYPERPARAMETER_NAMES
        },
        **summary,
    }
    (paths.model_dir / contract.CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    serving.write_code(paths.model_dir)


def restore(
    resumed: tuple[int, dict[str, Any]],
    *,
    args: argparse.Namespace,
    labels: list[str],
    num_train: int,
    model: nn.Module,
    optimization: engine.Optimization,
    loader: batching.Loader,
) -> engine.Progress:
    """Put every piece of training state back as the checkpoint recorded it; refuse a checkpoint
    that belongs to other data or another architecture."""
    step, state = resumed
    if state.get("arch") != args.model or state.get("labels") != labels:
        raise checkpoints.CheckpointError(
            f"checkpoint {contract.checkpoint_name(step)} was written for {state.get('arch')} with labels "
            f"{state.get('labels')}, not this job's {args.model} with {labels}; use a new training job name"
        )
    progress = engine.Progress(int(state["epoch"]), int(state["next_batch"]), int(state["step"]))
    if progress.next_batch and state["order"].tolist() != data.epoch_order(
        num_train, args.seed, progress.epoch
    ):
        raise checkpoints.CheckpointError(
            f"checkpoint {contract.checkpoint_name(step)}: the epoch's sample order differs, so the data "
            "changed since it was written; use a new training job name"
        )
    engine.unwrap(model).load_state_dict(state["model"])
    optimization.optimizer.load_state_dict(state["optimizer"])
    optimization.scheduler.load_state_dict(state["scheduler"])
    optimization.scaler.load_state_dict(state["scaler"])
    loader.load_state_dict(state["loader"])
    checkpoints.set_rng_state(state["rng"])
    log.info(
        "resumed from %s at epoch %d batch %d (step %d)",
        contract.checkpoint_name(step),
        progress.epoch,
        progress.next_batch,
        progress.step,
    )
    return progress


def main(
    args: argparse.Namespace,
    paths: contract.Paths,
    interruption: checkpoints.Interruption | None = None,
    clock: profiler.PhaseClock | None = None,
) -> None:
    """Train; `interruption` is the SIGTERM flag (installed by run() before anything slow starts),
    `clock` the job's phases so far (run() counts the process's start-up)."""
    validate_args(args)
    clock = clock or profiler.PhaseClock()
    with clock.phase("process group"):
        context = distributed.setup()
    try:
        if interruption is None:
            with checkpoints.Interruption() as installed:
                _train(args, paths, context, installed, clock)
        else:
            _train(args, paths, context, interruption, clock)
    finally:
        distributed.teardown(context)


def load_data(args: argparse.Namespace, paths: contract.Paths) -> data.DataSet:
    """The train channel split into training and validation images (by the manifest when given)."""
    manifest_dir = paths.channel(contract.CHANNEL_MANIFEST)
    manifest = manifest_dir / contract.MANIFEST_FILE if manifest_dir is not None else None
    if manifest is not None and not manifest.is_file():
        raise data.DataError(f"the manifest channel {manifest_dir} has no {contract.MANIFEST_FILE}")
    dataset = data.load_dataset(
        paths.channel(contract.CHANNEL_TRAIN),
        validation_root=paths.channel(contract.CHANNEL_VALIDATION),
        manifest=manifest,
        val_fraction=args.val_fraction,
    )
    if not dataset.validation:
        raise data.DataError(
            f"no validation images (val-fraction {args.val_fraction} of {len(dataset.train)} images): "
            "raise val-fraction, add images, or give the job a validation channel; tuning needs val-accuracy"
        )
    log.info(
        "%d labels, %d training and %d validation images, %d skipped",
        len(dataset.labels),
        len(dataset.train),
        len(dataset.validation),
        len(dataset.skipped),
    )
    return dataset


def build_model(
    args: argparse.Namespace, paths: contract.Paths, labels: list[str], device: torch.device
) -> nn.Module:
    """The architecture with a head for `labels`, from the pretrained channel's weights when named (a
    champion's head keeps the rows of the labels it knows), or the image's ImageNet weights. A resumed
    job then loads its checkpoint over these, so a spot restart continues from the checkpoint, not from
    the pretrained weights."""
    model = models.build_model(args.model, len(labels))
    if args.pretrained == contract.PRETRAINED_IMAGENET:
        # The backbone only: ImageNet's head would fit a data set of 1,000 labels, in ImageNet's order.
        head = models.head_prefix(model)
        imagenet = models.read_state_dict(models.imagenet_weights(args.model))
        models.load_pretrained(model, {k: v for k, v in imagenet.items() if not k.startswith(head)})
    elif args.pretrained:
        pretrained_dir = paths.channel(contract.CHANNEL_PRETRAINED)
        if pretrained_dir is None:
            raise models.ModelError(
                f"pretrained={args.pretrained} but the job has no '{contract.CHANNEL_PRETRAINED}' channel"
            )
        start = models.read_start_weights(pretrained_dir / args.pretrained)
        models.check_start_arch(start, args.model)
        models.load_pretrained(model, start.state, labels=labels, start_labels=start.labels)
    plant_fault(model, args.inject_fault)
    placed = model.to(device)
    if args.channels_last:
        # NHWC convolutions on tensor cores; cuDNN picks the fastest algorithm for the fixed batch shape
        torch.backends.cudnn.benchmark = device.type == "cuda"
        placed = placed.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # stubs lack it
    if args.compile:
        # In place: the module and its weights' names stay (checkpoints, model.pt, the hooks); the
        # forward compiles at the first step, which the phase line counts in "first step".
        placed.compile()
    return placed


def plant_fault(model: nn.Module, fault: str) -> None:
    """The training fault the inject-fault hyperparameter names, for the rules to find: with
    vanishing-gradient the images reach the model as zeros, as from a loader that delivers blank tensors
    (its first layer gets no gradient, and nothing tells one image from another). Scaling them down
    instead is not enough: BatchNorm in training mode divides by the batch's spread and brings the
    first layer's gradient back. Not part of the saved model."""
    if fault == contract.FAULT_VANISHING_GRADIENT:
        log.warning("fault injection: the model's input is replaced by zeros")
        model.register_forward_pre_hook(lambda _module, inputs: (torch.zeros_like(inputs[0]),))


def build_loaders(
    args: argparse.Namespace,
    dataset: data.DataSet,
    context: distributed.Context,
    kind: str,
    *,
    repeats: int = 1,
) -> tuple[batching.Loader, batching.Loader]:
    """This rank's training and validation loaders; the training one passes `repeats` times over the
    training images in each epoch."""
    busy = args.dali_feed_processes + (1 if args.prefetch_batches else 0) if kind == "dali" else 0
    workers = loaders.worker_count(args.num_workers, kind, busy=busy)
    if args.num_workers == contract.NUM_WORKERS_AUTO:
        log.info("%s loader: %d workers, sized from the instance's vCPUs", kind, workers)
    common = {
        "batch_size": args.batch_size,
        "image_size": args.image_size,
        "augment_load": args.augment_load,
        "seed": args.seed,
        "num_workers": workers,
        "device": context.device,
        "rank": context.rank,
        "world_size": context.world_size,
    }
    if kind == "dali":
        common |= {
            "feed_processes": args.dali_feed_processes,
            "dali_decode": args.dali_decode,
            "hw_decoder_load": args.dali_hw_decoder_load,
            "channels_last": args.channels_last,
        }
    train_loader = loaders.build_loader(
        kind,
        dataset.train * repeats,
        train=True,
        delay_ms=args.inject_loader_delay_ms,
        crop_scale_min=args.crop_scale_min,
        **common,
    )
    val_loader = loaders.build_loader(kind, dataset.validation, train=False, **common)
    if args.prefetch_batches and isinstance(train_loader, batching.BatchLoader):
        return batching.Prefetched(train_loader, args.prefetch_batches), val_loader
    return train_loader, val_loader


@dataclass(frozen=True)
class Job:
    """What one training run is made of, built once before its first step."""

    args: argparse.Namespace
    paths: contract.Paths
    context: distributed.Context
    dataset: data.DataSet
    loader_kind: str
    model: nn.Module
    loss_fn: nn.Module
    train_loader: batching.Loader
    val_loader: batching.Loader
    optimization: engine.Optimization
    store: checkpoints.CheckpointStore
    repeats: int  # passes over the training images in one epoch (min-steps)

    @property
    def labels(self) -> list[str]:
        return self.dataset.labels

    @property
    def train_samples(self) -> int:
        """The samples of one epoch: every training image, `repeats` times."""
        return len(self.dataset.train) * self.repeats


def set_up(
    args: argparse.Namespace,
    paths: contract.Paths,
    context: distributed.Context,
    clock: profiler.PhaseClock | None = None,
) -> Job:
    """Seed, data, model, loaders, optimizer and checkpoint store, in the order that fixes the seeded
    initial weights."""
    clock = clock or profiler.PhaseClock()
    configure_determinism(args.seed, context.device)
    with clock.phase("data"):
        dataset = load_data(args, paths)
    repeats = data.repeats_for_steps(len(dataset.train), args.batch_size, args.epochs, args.min_steps)
    if repeats > 1:
        log.info(
            "each epoch passes %d times over the training images (min-steps %d)", repeats, args.min_steps
        )
    with clock.phase("model"):
        model = build_model(args, paths, dataset.labels, context.device)
    kind = loaders.resolve_kind(args.loader, context.device)
    with clock.phase("loaders"):
        train_loader, val_loader = build_loaders(args, dataset, context, kind, repeats=repeats)
        optimization = build_optimization(args, model, steps_per_epoch=len(train_loader))
    # Rank 0 writes the checkpoints (the first host's directory) and resumes every rank from them.
    store = checkpoints.CheckpointStore(
        paths.checkpoint_dir / paths.job_name / paths.hosts[0], keep=args.keep_checkpoints
    )
    return Job(
        args=args,
        paths=paths,
        context=context,
        dataset=dataset,
        loader_kind=kind,
        model=model,
        loss_fn=nn.CrossEntropyLoss(),
        train_loader=train_loader,
        val_loader=val_loader,
        optimization=optimization,
        store=store,
        repeats=repeats,
    )


def resume(job: Job) -> engine.Progress | None:
    """Restore the newest valid checkpoint of this job; None when there is none. Rank 0 reads it from
    its host's directory and sends it to every rank, so the ranks of other hosts (whose directories
    need not hold rank 0's files) and of this one all start from the same step."""
    resumed = job.store.load_latest() if job.context.is_main else None
    resumed = distributed.broadcast_from_main(resumed, job.context)
    if resumed is None:
        return None
    return restore(
        resumed,
        args=job.args,
        labels=job.labels,
        num_train=job.train_samples,
        model=job.model,
        optimization=job.optimization,
        loader=job.train_loader,
    )


def initial_summary(job: Job) -> dict[str, Any]:
    """What config.json says about the data and the set-up; the epochs add the validation results."""
    return {
        "labels": len(job.labels),
        "train_images": len(job.dataset.train),
        "validation_images": len(job.dataset.validation),
        "skipped_files": len(job.dataset.skipped),
        # Which files and why: evaluation.json carries them to the run record (and the report).
        "skipped": [
            {"path": _channel_key(path, job.paths), "reason": reason}
            for path, reason in job.dataset.skipped[:MAX_SKIPPED_LISTED]
        ],
        "loader": job.loader_kind,
        "world_size": job.context.world_size,
        "train_repeats": job.repeats,
    }


def write_training_facts(job: Job) -> None:
    """What the rule check needs to know of the job besides its tensors (contract.TRAINING_FACTS_FILE)."""
    facts = {
        "labels": len(job.labels),
        "train_images": len(job.dataset.train),
        "validation_images": len(job.dataset.validation),
    }
    job.paths.training_facts_file.parent.mkdir(parents=True, exist_ok=True)
    job.paths.training_facts_file.write_text(json.dumps(facts) + "\n", encoding="utf-8")


# Data parallel: the steps between the ranks' agreements on a stop (one collective and one host read each;
# every step, they kept the host from queueing the next step). A spot interruption's two minutes' notice is
# far longer; a job of one process checks its own flag every step, at no cost.
STOP_CHECK_EVERY_STEPS = engine.LOG_EVERY_STEPS


def stop_check_due(step: int, context: distributed.Context) -> bool:
    """Whether the ranks agree on a stop after `step`: every step in one process, else every
    STOP_CHECK_EVERY_STEPS (the same steps on every rank, so all stop at the same one)."""
    return not context.enabled or step % STOP_CHECK_EVERY_STEPS == 0


class EpochLoop:
    """The epochs from `progress` on: checkpoints at the step interval and at epoch ends, a stop with
    a durable checkpoint when SIGTERM came, the system profile, and the metric lines."""

    def __init__(
        self,
        job: Job,
        progress: engine.Progress,
        *,
        resumed: bool,
        interruption: checkpoints.Interruption,
        hook: debugger.Hook | None,
        clock: profiler.PhaseClock | None = None,
    ) -> None:
        self.job = job
        self.clock = clock or profiler.PhaseClock()
        self.started: float | None = None  # when run() began; None again once the first step is timed
        self.progress = progress
        self.interruption = interruption
        self.hook = hook
        self.saved = (progress.epoch, progress.next_batch, progress.step) if resumed else None
        self.frozen: bool | None = None
        self.ddp_model: nn.Module = job.model
        self.summary = initial_summary(job)
        self.profile = profiler.SystemProfiler(
            job.paths.profile_dir, interval_s=job.args.profile_interval_ms / 1000
        )

    def run(self) -> None:
        """The epochs; the clock gets the first step (loader start-up, first forward and backward) and
        the rest of the loop's time besides validation and checkpoints as training."""
        started = self.started = time.perf_counter()
        before = sum(self.clock.seconds.get(name, 0.0) for name in LOOP_PHASES)
        try:
            with self.profile if self.job.context.is_main else contextlib.nullcontext():
                for epoch in range(self.progress.epoch, self.job.args.epochs):
                    self.epoch(epoch)
        finally:
            inside = sum(self.clock.seconds.get(name, 0.0) for name in LOOP_PHASES) - before
            self.clock.add(profiler.PhaseClock.TRAINING, time.perf_counter() - started - inside)

    def save(self, current: engine.Progress) -> None:
        """Checkpoint `current` in the background (rank 0), unless it is the position last saved."""
        position = (current.epoch, current.next_batch, current.step)
        if position == self.saved:
            return
        with self.clock.phase(PHASE_CHECKPOINTS):
            self._save(current)
        self.saved = position

    def _save(self, current: engine.Progress) -> None:
        job = self.job
        if job.context.is_main:
            state = checkpoint_state(
                args=job.args,
                model=job.model,
                optimization=job.optimization,
                loader=job.train_loader,
                progress=current,
                labels=job.labels,
                order=data.epoch_order(job.train_samples, job.args.seed, current.epoch),
            )
            log.info("writing checkpoint %s", contract.checkpoint_name(current.step))
            job.store.save_async(current.step, state)

    def stop(self, reason: str) -> None:
        """The interruption checkpoint is durable on rank 0 before any rank exits."""
        self.save(self.progress)
        self.job.store.close()
        distributed.barrier(self.job.context)
        raise checkpoints.Interrupted(reason)

    def after_step(self, current: engine.Progress, data_wait_s: float, compute_s: float) -> None:
        context, every = self.job.context, self.job.args.checkpoint_every_steps
        if self.started is not None:
            self.clock.add(PHASE_FIRST_STEP, time.perf_counter() - self.started)
            self.started = None
        if context.is_main:
            self.profile.step(current.step, data_wait_s, compute_s)
        if every and current.step % every == 0:
            self.save(current)
        if stop_check_due(current.step, context) and self.stop_agreed():
            self.stop(f"interrupted at step {current.step}")

    def epoch(self, epoch: int) -> None:
        """Train the rest of `epoch`, validate, emit its metrics, checkpoint its end."""
        job, progress = self.job, self.progress
        progress.epoch = epoch
        freeze = epoch < job.args.freeze_backbone_epochs
        if freeze != self.frozen:
            models.set_backbone_frozen(job.model, freeze)
            self.ddp_model = DistributedDataParallel(job.model) if job.context.enabled else job.model
            self.frozen = freeze
        debugger.train_mode(self.hook)
        result = engine.train_one_epoch(
            model=self.ddp_model,
            loss_fn=job.loss_fn,
            optimization=job.optimization,
            loader=job.train_loader,
            progress=progress,
            context=job.context,
            frozen_statistics=freeze or job.args.batchnorm == contract.BATCHNORM_FROZEN,
            before_backward=debugger.loss_scale_recorder(self.hook, job.optimization.scaler),
            after_step=self.after_step,
        )
        debugger.eval_mode(self.hook)
        with self.clock.phase(PHASE_VALIDATION):
            evaluation = engine.evaluate(
                self.ddp_model,
                job.loss_fn,
                job.val_loader,
                job.context,
                use_amp=job.optimization.use_amp,
                amp_dtype=job.optimization.amp_dtype,
                memory_format=job.optimization.memory_format,
            )
        metrics = {
            contract.METRIC_VAL_LOSS: evaluation.loss,
            contract.METRIC_VAL_ACCURACY: evaluation.top1,
            contract.METRIC_VAL_TOP3: evaluation.top3,
        }
        if result.seconds > 0 and result.images:
            metrics[contract.METRIC_IMAGES_PER_SECOND] = result.images / result.seconds
        for name, value in metrics.items():
            engine.emit(name, value, epoch=epoch, step=progress.step, context=job.context)
        self.summary.update(
            val_loss=evaluation.loss, val_accuracy=evaluation.top1, val_top3_accuracy=evaluation.top3
        )
        progress.epoch, progress.next_batch = epoch + 1, 0
        self.save(progress)
        if self.stop_agreed():
            self.stop(f"interrupted after epoch {epoch}")

    def stop_agreed(self) -> bool:
        """Whether any rank got SIGTERM: all ranks stop at the same point, or one waits forever in a
        collective the others left (a SIGTERM that reached one rank during validation and another
        after it deadlocked a 2-host job until SIGKILL)."""
        return distributed.all_reduce_sum([float(self.interruption.requested)], self.job.context)[0] > 0


def _train(
    args: argparse.Namespace,
    paths: contract.Paths,
    context: distributed.Context,
    interruption: checkpoints.Interruption,
    clock: profiler.PhaseClock,
) -> None:
    job = set_up(args, paths, context, clock)
    if context.is_main:
        write_training_facts(job)
    with clock.phase("resume"):
        resumed = resume(job)
    progress = resumed or engine.Progress()
    # The hook counts validation batches as steps too: one pass of val_loader per finished epoch.
    start = debugger.Position(progress.step, progress.epoch * len(job.val_loader))
    steps = args.epochs * len(job.train_loader)
    hook = debugger.attach(job.model, job.loss_fn, args, paths, start, steps) if context.is_main else None
    loop = EpochLoop(
        job, progress, resumed=resumed is not None, interruption=interruption, hook=hook, clock=clock
    )
    loop.run()
    with clock.phase(PHASE_CHECKPOINTS):
        job.store.close()
    debugger.close(hook)
    if context.is_main:
        with clock.phase("model write"):
            write_model(paths, args, job.model, job.labels, {**loop.summary, "steps": progress.step})
        log.info(clock.line())


def run(argv: Sequence[str] | None = None) -> int:
    """Parse, train, and turn every failure into SageMaker's failure file and a non-zero exit."""
    clock = profiler.PhaseClock()
    clock.add("start-up", time.time() - psutil.Process().create_time())  # interpreter and imports
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    paths = contract.resolve_paths()

    def body() -> int:
        try:
            with checkpoints.Interruption() as interruption:
                args, unknown = get_args_parser().parse_known_args(argv)
                if unknown:
                    log.warning("ignoring unknown hyperparameters: %s", " ".join(unknown))
                main(args, paths, interruption, clock)
        except checkpoints.Interrupted as stop:
            log.warning("%s; checkpoint written, exiting with %d", stop, contract.INTERRUPTED_EXIT_CODE)
            return contract.INTERRUPTED_EXIT_CODE
        return 0

    # Processes sharing this host's output directory: the first failure is the cause, keep its reason.
    return contract.run_reporting_failure(
        paths,
        body,
        invalid="invalid hyperparameters",
        argv=argv,
        keep_first=distributed.local_world_size() > 1,
    )


if __name__ == "__main__":
    sys.exit(run())
