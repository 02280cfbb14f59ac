"""The training step's host side: what it reads back from the device, the job's phase clock, the
compiled model and the learning rate for the batch."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from retrain_contract import container as contract
from retrain_training import distributed, engine, profiler, train

CPU = torch.device("cpu")


class Batches:
    """A loader of `count` fixed random batches."""

    def __init__(self, count: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.batches = [
            (torch.randn(4, 3, generator=generator), torch.randint(0, 2, (4,), generator=generator))
            for _ in range(count)
        ]

    def __len__(self) -> int:
        return len(self.batches)

    def epoch(self, epoch: int, start_batch: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        yield from self.batches[start_batch:]

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state


def test_an_epoch_reads_the_loss_back_from_the_device_once_per_logged_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN 30 steps, a train-loss line every LOG_EVERY_STEPS, and every host read of a tensor counted
    reads: list[str] = []
    for name in ("cpu", "item", "tolist", "__float__"):
        original = getattr(torch.Tensor, name)

        def counted(self: torch.Tensor, *args: Any, _original: Any = original, _name: str = name) -> Any:
            reads.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counted)
    model = nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimization = engine.Optimization(
        optimizer=optimizer,
        scheduler=torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0),
        scaler=torch.amp.GradScaler("cpu", enabled=False),
    )
    context = distributed.Context(rank=0, world_size=1, local_rank=0, device=CPU)
    # WHEN an epoch trains
    result = engine.train_one_epoch(
        model=model,
        loss_fn=nn.CrossEntropyLoss(),
        optimization=optimization,
        loader=Batches(30),
        progress=engine.Progress(),
        context=context,
    )
    # THEN the host waited for the device 3 times for the windows' lines and once for the epoch's mean,
    # never once per step (a GPU would idle while the host queues each next step)
    assert reads.count("__float__") == 30 // engine.LOG_EVERY_STEPS + 1
    assert [r for r in reads if r != "__float__"] == []
    assert result.images == 120


def test_the_phase_clock_sums_repeats_and_counts_all_but_training_as_fixed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = iter([10.0, 10.5, 20.0, 20.25])
    monkeypatch.setattr(time, "perf_counter", lambda: next(now))
    clock = profiler.PhaseClock()
    with clock.phase("validation"):
        pass
    with clock.phase("validation"):
        pass
    clock.add(profiler.PhaseClock.TRAINING, 4.0)
    clock.add("start-up", 1.25)
    assert clock.seconds == {"validation": 0.75, "training": 4.0, "start-up": 1.25}
    assert clock.fixed_s == 2.0
    assert clock.line() == (
        "job phases (s): validation 0.75, training 4.00, start-up 1.25; fixed cost 2.00 of 6.00"
    )


def test_compile_compiles_the_forward_in_place_and_keeps_the_weights_names(tmp_path: Path) -> None:
    # GIVEN the same model built with compile off and on
    paths = contract.resolve_paths({contract.BASE_DIR_ENV: str(tmp_path)})
    plain_args = train.get_args_parser().parse_args([])
    compiled_args = train.get_args_parser().parse_args(["--compile", "true"])
    torch.manual_seed(0)
    plain = train.build_model(plain_args, paths, ["a", "b"], CPU)
    torch.manual_seed(0)
    compiled = train.build_model(compiled_args, paths, ["a", "b"], CPU)
    # THEN only the second's forward is compiled (at its first call), in place: the module, the names
    # of its weights (checkpoints, model.pt, Debugger's hooks) and their values are the plain model's
    assert compiled._compiled_call_impl is not None and plain._compiled_call_impl is None
    assert type(compiled) is type(plain)
    assert list(compiled.state_dict()) == list(plain.state_dict())
    weights = zip(compiled.state_dict().values(), plain.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in weights)


@pytest.mark.parametrize(
    ("flags", "lr"),
    [
        ([], 0.01),  # as given
        (["--lr-reference-batch", "32", "--batch-size", "256"], 0.08),  # 8x the batch, 8x the lr
        (["--lr-reference-batch", "256", "--batch-size", "32"], 0.00125),
    ],
)
def test_the_learning_rate_scales_with_the_batch_from_its_reference(flags: list[str], lr: float) -> None:
    args = train.get_args_parser().parse_args(["--lr", "0.01", *flags])
    optimizer = train.build_optimizer(args, nn.Linear(3, 2))
    assert optimizer.param_groups[0]["lr"] == pytest.approx(lr)
