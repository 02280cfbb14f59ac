"""Small real training loops that drive a real smdebug hook, so the rules read real tensors."""

from __future__ import annotations

import argparse
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


def train_with_hook(
    base: Path,
    *,
    lr: float = 0.1,
    steps: int = 30,
    interval: int = 1,
    train_size: int = 64,
    noisy_labels: bool = False,
    eval_every: int = 10,
    hidden: int = 16,
    activation: type[nn.Module] = nn.ReLU,
    input_scale: float = 1.0,
    grad_scale: float | None = None,
) -> contract.Paths:
    """Train a small MLP for `steps` steps with the hook attached, validating every `eval_every`."""
    torch.manual_seed(0)
    paths = paths_under(base)
    model = nn.Sequential(nn.Linear(8, hidden), activation(), nn.Linear(hidden, 2))
    loss_fn = nn.CrossEntropyLoss()
    hook = debugger.attach(model, loss_fn, hook_args(debug_interval=interval), paths)
    x, y = separable_data(train_size, seed=1)
    x = x * input_scale
    if noisy_labels:
        y = torch.randint(0, 2, y.shape, generator=torch.Generator().manual_seed(2))
    vx, vy = separable_data(64, seed=3)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scaler = None if grad_scale is None else torch.amp.GradScaler("cpu", init_scale=grad_scale)
    batch = 16
    for step in range(steps):
        debugger.train_mode(hook)
        start = (step * batch) % train_size
        loss = loss_fn(model(x[start : start + batch]), y[start : start + batch])
        optimizer.zero_grad()
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:  # mixed precision's loss scaling: overflowing steps are skipped and the scale lowered
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        if (step + 1) % eval_every == 0:
            debugger.eval_mode(hook)
            with torch.no_grad():
                for vstart in range(0, 64, 32):
                    loss_fn(model(vx[vstart : vstart + 32]), vy[vstart : vstart + 32])
    debugger.close(hook)
    return paths
