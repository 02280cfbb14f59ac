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


def count_host_reads(monkeypatch: pytest.MonkeyPatch, loader: Batches) -> list[str]:
    """Every read of a tensor's value on the host from now on (.cpu(), .item(), .tolist(), float(), and
    .to() onto the CPU of any tensor but the loader's batches, which start there)."""
    reads: list[str] = []
    for name in ("cpu", "item", "tolist", "__float__"):
        original = getattr(torch.Tensor, name)

        def counted(self: torch.Tensor, *args: Any, _original: Any = original, _name: str = name) -> Any:
            reads.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counted)
    batches = {id(tensor) for batch in loader.batches for tensor in batch}
    to = torch.Tensor.to

    def to_counted(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        target = kwargs.get("device", args[0] if args else None)
        if id(self) not in batches and str(target).startswith("cpu"):
            reads.append("to cpu")
        return to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to_counted)
    return reads


def test_an_epoch_on_the_default_recipe_reads_from_the_device_once_per_logged_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN the optimizer, schedule and mixed precision train.py builds by default for a GPU (amp on, its
    # default type), on this CPU (amp-on-cpu), and 30 steps with a train-loss line every LOG_EVERY_STEPS
    args = train.get_args_parser().parse_args(["--amp-on-cpu", "true", "--lr", "0.1"])
    model = nn.Linear(3, 2)
    optimization = train.build_optimization(args, model, steps_per_epoch=30)
    assert optimization.use_amp
    loader = Batches(30)
    reads = count_host_reads(monkeypatch, loader)
    context = distributed.Context(rank=0, world_size=1, local_rank=0, device=CPU)
    # WHEN an epoch trains
    result = engine.train_one_epoch(
        model=model,
        loss_fn=nn.CrossEntropyLoss(),
        optimization=optimization,
        loader=loader,
        progress=engine.Progress(),
        context=context,
    )
    # THEN the host waited for the device 3 times for the windows' lines and once for the epoch's mean,
    # never once per step (a GPU would idle while the host queues each next step): no loss scaler's
    # .item() in its step, no copy of a value to the host
    assert reads.count("__float__") == 30 // engine.LOG_EVERY_STEPS + 1
    assert [r for r in reads if r != "__float__"] == []
    assert result.images == 120


@pytest.mark.parametrize(("device", "dtype"), [("cpu", torch.bfloat16), ("cuda", None)])
def test_auto_mixed_precision_is_bfloat16_where_the_device_computes_it(
    monkeypatch: pytest.MonkeyPatch, device: str, dtype: torch.dtype | None
) -> None:
    # A GPU from Ampere on computes bfloat16 natively; a T4 or V100 does not, and gets float16 with its scaler
    for native, expected in ((True, torch.bfloat16), (False, torch.float16)):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True, n=native: n)
        resolved = train.resolve_amp_dtype(contract.AMP_DTYPE_AUTO, torch.device(device))
        assert resolved == (dtype or expected)
    assert train.resolve_amp_dtype("float16", torch.device(device)) == torch.float16


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


def test_data_parallel_ranks_agree_on_a_stop_every_few_steps_not_every_step() -> None:
    # GIVEN one process, and one rank of two in a process group
    alone = distributed.Context(rank=0, world_size=1, local_rank=0, device=CPU)
    ranked = distributed.Context(rank=1, world_size=2, local_rank=1, device=CPU, backend="gloo")
    # THEN one process checks its own SIGTERM flag after every step (no collective, no host read)
    assert all(train.stop_check_due(step, alone) for step in range(1, 31))
    # AND the ranks all-reduce theirs at the same 3 steps of 30 (each a host read)
    due = [step for step in range(1, 31) if train.stop_check_due(step, ranked)]
    assert due == [10, 20, 30]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_the_default_steps_never_wait_for_the_device() -> None:
    # GIVEN train.py's default optimization on the GPU, and fewer steps than a loss line's window, their
    # batches already there
    device = torch.device("cuda")
    args = train.get_args_parser().parse_args(["--lr", "0.1"])
    model = nn.Linear(3, 2).to(device)
    optimization = train.build_optimization(args, model, steps_per_epoch=30)
    loader = Batches(engine.LOG_EVERY_STEPS - 1)
    loader.batches = [(images.to(device), labels.to(device)) for images, labels in loader.batches]
    last = len(loader.batches)

    def check_syncs(progress: engine.Progress, _wait: float, _compute: float) -> None:
        # from the first step's end to the last's, a synchronisation with the device raises; the
        # epoch's mean loss, read after the last step, is the one read the epoch makes
        torch.cuda.set_sync_debug_mode("error" if progress.step < last else "default")

    # WHEN the epoch trains THEN no step between the first and the last synchronised
    try:
        engine.train_one_epoch(
            model=model,
            loss_fn=nn.CrossEntropyLoss(),
            optimization=optimization,
            loader=loader,
            progress=engine.Progress(),
            context=distributed.Context(rank=0, world_size=1, local_rank=0, device=device),
            after_step=check_syncs,
        )
    finally:
        torch.cuda.set_sync_debug_mode("default")
