"""Small real training loops that drive a real smdebug hook, so the rules read real tensors."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from retrain_contract import container as contract
from retrain_training import debugger


def paths_under(base: Path) -> contract.Paths:
    return contract.resolve_paths({contract.BASE_DIR_ENV: str(base)})


def hook_args(*, debug_hook: bool = True, debug_interval: int = 1) -> argparse.Namespace:
    return argparse.Namespace(debug_hook=debug_hook, debug_interval=debug_interval)


def separable_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=generator)
    y = (x[:, 0] + x[:, 1] > 0).long()
    return x, y


@dataclass(frozen=True)
class Loop:
    """How `train_with_hook` trains; the defaults are a healthy run on separable data."""

    lr: float = 0.1
    steps: int = 30
    interval: int = 1  # the hook saves every `interval` steps
    train_size: int = 64
    noisy_labels: bool = False  # random labels: nothing to generalise, only to memorise
    eval_every: int = 10  # validate after every `eval_every` steps
    hidden: int = 16
    activation: type[nn.Module] = nn.ReLU
    input_scale: float = 1.0
    grad_scale: float | None = None  # set: mixed precision's loss scaling, starting at this scale
    converged: bool = False  # start from weights that fit the data with a wide margin (a fine-tune's end)


HEALTHY = Loop()


def train_with_hook(base: Path, loop: Loop = HEALTHY) -> contract.Paths:
    """Train a small MLP for `loop.steps` steps with the hook attached, validating every `loop.eval_every`."""
    torch.manual_seed(0)
    paths = paths_under(base)
    model = nn.Sequential(nn.Linear(8, loop.hidden), loop.activation(), nn.Linear(loop.hidden, 2))
    loss_fn = nn.CrossEntropyLoss()
    x, y = separable_data(loop.train_size, seed=1)
    if loop.converged:
        fit(model, loss_fn, x, y)
    hook = debugger.attach(model, loss_fn, hook_args(debug_interval=loop.interval), paths)
    x = x * loop.input_scale
    if loop.noisy_labels:
        y = torch.randint(0, 2, y.shape, generator=torch.Generator().manual_seed(2))
    vx, vy = separable_data(64, seed=3)
    optimizer = torch.optim.SGD(model.parameters(), lr=loop.lr)
    scaler = None if loop.grad_scale is None else torch.amp.GradScaler("cpu", init_scale=loop.grad_scale)
    record = None if scaler is None else debugger.loss_scale_recorder(hook, scaler)
    batch = 16
    for step in range(loop.steps):
        debugger.train_mode(hook)
        start = (step * batch) % loop.train_size
        loss = loss_fn(model(x[start : start + batch]), y[start : start + batch])
        optimizer.zero_grad()
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:  # mixed precision's loss scaling: overflowing steps are skipped and the scale lowered
            if record is not None:
                record()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        if (step + 1) % loop.eval_every == 0:
            debugger.eval_mode(hook)
            with torch.no_grad():
                for vstart in range(0, 64, 32):
                    loss_fn(model(vx[vstart : vstart + 32]), vy[vstart : vstart + 32])
    debugger.close(hook)
    return paths


def fit(model: nn.Sequential, loss_fn: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    """Train without a hook until the data is fitted, then widen the margins as long training does: the
    loss and every gradient end up near 1e-7, and the predictions right."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(300):
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    with torch.no_grad():
        model[-1].weight.mul_(3.0)
        model[-1].bias.mul_(3.0)
