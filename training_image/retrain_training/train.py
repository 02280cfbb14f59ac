"""SageMaker training entry point (SAGEMAKER_PROGRAM=train.py): transfer-learn a ResNet classifier.

Hyperparameters arrive as command-line flags (script mode), paths from the SM_* environment
(contract.resolve_paths). Resumes from the newest valid checkpoint of this job and host; on SIGTERM
finishes the step, checkpoints and exits with contract.INTERRUPTED_EXIT_CODE; on any error writes
the reason to <base>/output/failure and exits non-zero.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from retrain_contract import container as contract
from retrain_training import checkpoints, data, debugger, distributed, engine, loaders, models, profiler

log = logging.getLogger("train")
CHECKPOINT_VERSION = 1


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
        if spec.minimum == 1 and value < 1:
            raise ValueError(f"hyperparameter {spec.name} must be at least 1, got {value}")
        if spec.minimum == 0 and value < 0:
            raise ValueError(f"hyperparameter {spec.name} must not be negative, got {value}")
    loaders.check_crop_scale_min(args.crop_scale_min)


def configure_determinism(seed: int, device: torch.device) -> None:
    """Same seed, same results: bit for bit on CPU; on GPU cuDNN autotuning is kept for speed."""
    torch.manual_seed(seed)
    if device.type == "cpu":
        torch.use_deterministic_algorithms(True)


def build_optimizer(args: argparse.Namespace, model: nn.Module) -> torch.optim.Optimizer:
    if args.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    return torch.optim.SGD(
        model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay
    )


def checkpoint_state(
    *,
    args: argparse.Namespace,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    scaler: torch.amp.GradScaler,
    loader: loaders.Loader,
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
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict(),
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
    """model.pt (state_dict + arch + labels), labels.json and config.json, only in SM_MODEL_DIR."""
    paths.model_dir.mkdir(parents=True, exist_ok=True)
    artifact = {
        "arch": args.model,
        "labels": labels,
        "image_size": args.image_size,
        "state_dict": engine.unwrap(model).state_dict(),
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


def restore(
    resumed: tuple[int, dict[str, Any]],
    *,
    args: argparse.Namespace,
    labels: list[str],
    num_train: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    scaler: torch.amp.GradScaler,
    loader: loaders.Loader,
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
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    scaler.load_state_dict(state["scaler"])
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
    args: argparse.Namespace, paths: contract.Paths, interruption: checkpoints.Interruption | None = None
) -> None:
    """Train; `interruption` is the SIGTERM flag (installed by run() before anything slow starts)."""
    validate_args(args)
    context = distributed.setup()
    try:
        if interruption is None:
            with checkpoints.Interruption() as installed:
                _train(args, paths, context, installed)
        else:
            _train(args, paths, context, interruption)
    finally:
        distributed.teardown(context)


def _train(
    args: argparse.Namespace,
    paths: contract.Paths,
    context: distributed.Context,
    interruption: checkpoints.Interruption,
) -> None:
    device = context.device
    configure_determinism(args.seed, device)
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
    labels = dataset.labels
    if not dataset.validation:
        raise data.DataError(
            f"no validation images (val-fraction {args.val_fraction} of {len(dataset.train)} images): "
            "raise val-fraction, add images, or give the job a validation channel; tuning needs val-accuracy"
        )
    log.info(
        "%d labels, %d training and %d validation images, %d skipped",
        len(labels),
        len(dataset.train),
        len(dataset.validation),
        len(dataset.skipped),
    )

    model = models.build_model(args.model, len(labels))
    if args.pretrained:
        pretrained_dir = paths.channel(contract.CHANNEL_PRETRAINED)
        if pretrained_dir is None:
            raise models.ModelError(
                f"pretrained={args.pretrained} but the job has no '{contract.CHANNEL_PRETRAINED}' channel"
            )
        models.load_pretrained(model, models.read_state_dict(pretrained_dir / args.pretrained))
    model.to(device)
    use_amp = args.amp and device.type == "cuda"
    kind = loaders.resolve_kind(args.loader, device)
    common = {
        "batch_size": args.batch_size,
        "image_size": args.image_size,
        "augment_load": args.augment_load,
        "seed": args.seed,
        "num_workers": args.num_workers,
        "device": device,
        "rank": context.rank,
        "world_size": context.world_size,
    }
    train_loader = loaders.build_loader(
        kind,
        dataset.train,
        train=True,
        delay_ms=args.inject_loader_delay_ms,
        crop_scale_min=args.crop_scale_min,
        **common,
    )
    val_loader = loaders.build_loader(kind, dataset.validation, train=False, **common)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = build_optimizer(args, model)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * len(train_loader))
    scaler = torch.amp.GradScaler(device.type, enabled=use_amp)
    progress = engine.Progress()

    # Every rank resumes from the checkpoints rank 0 writes (the first host's directory).
    store = checkpoints.CheckpointStore(
        paths.checkpoint_dir / paths.job_name / paths.hosts[0], keep=args.keep_checkpoints
    )
    resumed = store.load_latest()
    if resumed is not None:
        progress = restore(
            resumed,
            args=args,
            labels=labels,
            num_train=len(dataset.train),
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
            scaler=scaler,
            loader=train_loader,
        )

    hook = debugger.attach(model, loss_fn, args, paths) if context.is_main else None
    debugger.resume_at(hook, progress.step)
    saved = (progress.epoch, progress.next_batch, progress.step) if resumed is not None else None

    def save(current: engine.Progress) -> None:
        nonlocal saved
        position = (current.epoch, current.next_batch, current.step)
        if position == saved:
            return
        if context.is_main:
            order = data.epoch_order(len(dataset.train), args.seed, current.epoch)
            state = checkpoint_state(
                args=args,
                model=model,
                optimizer=optimizer,
                scheduler=scheduler,
                scaler=scaler,
                loader=train_loader,
                progress=current,
                labels=labels,
                order=order,
            )
            log.info("writing checkpoint %s", contract.checkpoint_name(current.step))
            store.save_async(current.step, state)
        saved = position

    def stop(reason: str) -> None:
        """The interruption checkpoint is durable on rank 0 before any rank exits."""
        save(progress)
        store.close()
        distributed.barrier(context)
        raise checkpoints.Interrupted(reason)

    frozen: bool | None = None
    ddp_model: nn.Module = model
    summary: dict[str, Any] = {
        "labels": len(labels),
        "train_images": len(dataset.train),
        "validation_images": len(dataset.validation),
        "skipped_files": len(dataset.skipped),
        # Which files and why: evaluation.json carries them to the run record (and the report).
        "skipped": [
            {"path": _channel_key(path, paths), "reason": reason}
            for path, reason in dataset.skipped[:MAX_SKIPPED_LISTED]
        ],
        "loader": kind,
        "world_size": context.world_size,
    }
    profile = profiler.SystemProfiler(paths.profile_dir, interval_s=args.profile_interval_ms / 1000)
    with profile if context.is_main else contextlib.nullcontext():

        def after_step(current: engine.Progress, data_wait_s: float, compute_s: float) -> None:
            if context.is_main:
                profile.step(current.step, data_wait_s, compute_s)
            if args.checkpoint_every_steps and current.step % args.checkpoint_every_steps == 0:
                save(current)
            if distributed.all_reduce_sum([float(interruption.requested)], context)[0] > 0:
                stop(f"interrupted at step {current.step}")

        for epoch in range(progress.epoch, args.epochs):
            progress.epoch = epoch
            freeze = epoch < args.freeze_backbone_epochs
            if freeze != frozen:
                models.set_backbone_frozen(model, freeze)
                ddp_model = DistributedDataParallel(model) if context.enabled else model
                frozen = freeze
            debugger.train_mode(hook)
            result = engine.train_one_epoch(
                model=ddp_model,
                loss_fn=loss_fn,
                optimizer=optimizer,
                scheduler=scheduler,
                scaler=scaler,
                loader=train_loader,
                progress=progress,
                context=context,
                use_amp=use_amp,
                frozen_backbone=freeze,
                after_step=after_step,
            )
            debugger.eval_mode(hook)
            evaluation = engine.evaluate(ddp_model, loss_fn, val_loader, context, use_amp=use_amp)
            metrics = {
                contract.METRIC_VAL_LOSS: evaluation.loss,
                contract.METRIC_VAL_ACCURACY: evaluation.top1,
                contract.METRIC_VAL_TOP3: evaluation.top3,
            }
            if result.seconds > 0 and result.images:
                metrics[contract.METRIC_IMAGES_PER_SECOND] = result.images / result.seconds
            for name, value in metrics.items():
                engine.emit(name, value, epoch=epoch, step=progress.step, context=context)
            summary.update(
                val_loss=evaluation.loss, val_accuracy=evaluation.top1, val_top3_accuracy=evaluation.top3
            )
            progress.epoch, progress.next_batch = epoch + 1, 0
            save(progress)
            if interruption.requested:
                stop(f"interrupted after epoch {epoch}")
    store.close()
    debugger.close(hook)
    if context.is_main:
        write_model(paths, args, model, labels, {**summary, "steps": progress.step})


def run(argv: Sequence[str] | None = None) -> int:
    """Parse, train, and turn every failure into SageMaker's failure file and a non-zero exit."""
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
                main(args, paths, interruption)
        except checkpoints.Interrupted as stop:
            log.warning("%s; checkpoint written, exiting with %d", stop, contract.INTERRUPTED_EXIT_CODE)
            return contract.INTERRUPTED_EXIT_CODE
        return 0

    return contract.run_reporting_failure(paths, body, invalid="invalid hyperparameters", argv=argv)


if __name__ == "__main__":
    sys.exit(run())
