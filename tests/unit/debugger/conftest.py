"""Training runs shared by the rule tests: each is a real loop with a real smdebug hook (seconds)."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch import nn

from retrain_contract import container as contract
from tests.unit.debugger.loops import Loop, train_with_hook


@pytest.fixture(scope="session")
def healthy_run(tmp_path_factory: pytest.TempPathFactory) -> contract.Paths:
    return train_with_hook(tmp_path_factory.mktemp("healthy"))


@pytest.fixture(scope="session")
def exploding_run(tmp_path_factory: pytest.TempPathFactory) -> contract.Paths:
    # No ReLU: a huge step cannot kill units (which would be a real vanishing gradient), only blow up.
    return train_with_hook(tmp_path_factory.mktemp("exploding"), Loop(lr=1e8, activation=nn.Identity))


@pytest.fixture(scope="session")
def zero_lr_run(tmp_path_factory: pytest.TempPathFactory) -> contract.Paths:
    # Enough steps for LossNotDecreasing's windows of 50 to compare one with the first.
    return train_with_hook(tmp_path_factory.mktemp("zero-lr"), Loop(lr=0.0, steps=120))


@pytest.fixture(scope="session")
def overfit_run(tmp_path_factory: pytest.TempPathFactory) -> contract.Paths:
    # 16 samples with random labels and a wide layer: memorised, while validation loss rises.
    return train_with_hook(
        tmp_path_factory.mktemp("overfit"),
        Loop(train_size=16, noisy_labels=True, steps=60, hidden=128, lr=0.5, eval_every=15),
    )


@pytest.fixture
def empty_dir(tmp_path: Path) -> Path:
    return tmp_path
