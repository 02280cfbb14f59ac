from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from smdebug import modes
from smdebug.trials import create_trial
from torch import nn

from retrain_training import debugger
from tests.unit.debugger.loops import Loop, hook_args, paths_under, train_with_hook


def test_hook_saves_losses_and_gradient_summaries_at_the_interval(tmp_path: Path) -> None:
    # GIVEN a 12-step training run with the hook at interval 4
    paths = train_with_hook(tmp_path, Loop(steps=12, interval=4, eval_every=12))

    # WHEN the tensors are read back as a trial
    trial = create_trial(str(paths.tensors_dir))

    # THEN training steps 0, 4 and 8 hold the loss and a gradient norm, and every validation batch its loss
    assert trial.steps(mode=modes.TRAIN) == [0, 4, 8]
    loss = next(name for name in trial.tensor_names(collection="losses"))
    assert len(trial.tensor(loss).steps(mode=modes.EVAL)) == 2
    gradient = trial.tensor_names(collection="gradients")[0]
    assert trial.tensor(gradient).reduction_value(4, "l2", abs=False) > 0


def test_hook_watches_the_weight_matrices_not_the_biases(tmp_path: Path) -> None:
    # GIVEN a run of an MLP (two Linear layers: 2-D weights and 1-D biases) with the hook
    paths = train_with_hook(tmp_path, Loop(steps=2, interval=1, eval_every=2))

    # WHEN its tensors are read back
    trial = create_trial(str(paths.tensors_dir))

    # THEN the gradients and weights saved are those of the two weight matrices only
    assert sorted(trial.tensor_names(collection="gradients")) == [
        "gradient/Sequential_0.weight",
        "gradient/Sequential_2.weight",
    ]
    assert sorted(trial.tensor_names(collection="weights")) == ["Sequential_0.weight", "Sequential_2.weight"]


def test_hook_is_off_when_the_hyperparameter_says_so(tmp_path: Path) -> None:
    # GIVEN debug-hook false
    paths = paths_under(tmp_path)

    # WHEN the hook is attached
    hook = debugger.attach(nn.Linear(2, 2), nn.CrossEntropyLoss(), hook_args(debug_hook=False), paths)

    # THEN there is no hook and nothing is written
    assert hook is None
    assert not paths.tensors_dir.exists()


def test_hook_follows_sagemakers_debug_hook_config_in_managed_mode(tmp_path: Path) -> None:
    # GIVEN the debughookconfig.json SageMaker writes from DebugHookConfig
    paths = paths_under(tmp_path)
    managed_dir = tmp_path / "managed-tensors"
    config = debugger.hook_config_path(paths)
    config.parent.mkdir(parents=True)
    config.write_text(
        json.dumps(
            {
                "LocalPath": str(managed_dir),
                "HookParameters": {"save_interval": "1"},
                "CollectionConfigurations": [{"CollectionName": "losses"}],
            }
        )
    )

    # WHEN the hook is attached and one step runs
    model, loss_fn = nn.Linear(2, 2), nn.CrossEntropyLoss()
    hook = debugger.attach(model, loss_fn, hook_args(), paths)
    import torch

    loss_fn(model(torch.ones(1, 2)), torch.tensor([1])).backward()
    debugger.close(hook)

    # THEN the tensors went where the config says, not to the default directory
    assert create_trial(str(managed_dir)).tensor_names(collection="losses")
    assert not paths.tensors_dir.exists()


def test_a_resumed_hook_continues_the_step_count(tmp_path: Path) -> None:
    # GIVEN a hook resumed after 100 training steps and 20 validation batches
    paths = paths_under(tmp_path)
    model, loss_fn = nn.Linear(2, 2), nn.CrossEntropyLoss()
    hook = debugger.attach(model, loss_fn, hook_args(), paths, debugger.Position(100, 20))

    # WHEN one training step and one validation batch run
    import torch

    loss_fn(model(torch.ones(1, 2)), torch.tensor([1])).backward()
    debugger.eval_mode(hook)
    with torch.no_grad():
        loss_fn(model(torch.ones(1, 2)), torch.tensor([1]))
    debugger.close(hook)

    # THEN they are global steps 120 and 121, training step 100 and validation step 20
    trial = create_trial(str(paths.tensors_dir))
    assert trial.steps() == [120, 121]
    assert trial.steps(mode=modes.TRAIN) == [100]
    assert trial.steps(mode=modes.EVAL) == [20]


def test_a_restarted_hook_keeps_the_steps_before_its_start_and_saves_the_rest_again(tmp_path: Path) -> None:
    # GIVEN the tensors of a closed run of 4 steps, and the claim file of one killed while it ran
    paths = train_with_hook(tmp_path, Loop(steps=4, eval_every=100))
    (paths.tensors_dir / debugger.CLAIM_FILE).touch()

    # WHEN a run resumed after 2 steps attaches its hook in the same place and trains 2 steps
    model, loss_fn = nn.Linear(2, 2), nn.CrossEntropyLoss()
    hook = debugger.attach(model, loss_fn, hook_args(), paths, debugger.Position(2))
    import torch

    for _ in range(2):
        loss_fn(model(torch.ones(1, 2)), torch.tensor([1])).backward()
    debugger.close(hook)

    # THEN steps 0 and 1 are the first run's and steps 2 and 3 this run's (its Linear's tensors)
    trial = create_trial(str(paths.tensors_dir))
    assert trial.steps() == [0, 1, 2, 3]
    assert trial.tensor("gradient/Linear_weight").steps() == [2, 3]
    assert trial.tensor("gradient/Sequential_0.weight").steps() == [0, 1]


def test_a_zero_interval_is_refused_with_the_hyperparameter_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="debug-interval"):
        debugger.build_hook(tmp_path / "t", 0)


def test_a_compiled_model_with_the_hook_compiles_its_graphs_once(tmp_path: Path) -> None:
    from torch._dynamo.testing import CompileCounter

    # GIVEN a model with the debug hook attached (saving every 5 steps), compiled in place as train.py
    # does with compile true, by a backend that counts the graphs Dynamo hands it
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    loss_fn = nn.CrossEntropyLoss()
    hook = debugger.attach(model, loss_fn, hook_args(debug_interval=5), paths_under(tmp_path))
    counter = CompileCounter()
    model.compile(backend=counter)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    # WHEN it trains 12 steps
    for _ in range(12):
        debugger.train_mode(hook)
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    debugger.close(hook)
    # THEN the forward compiled once: the hook's step-numbered calls stay out of the compiled region
    # (with them inside, Dynamo guarded on the step and compiled again every step up to its limit)
    assert counter.frame_count == 1, counter.frame_count
    # AND the hook saved what it saves uncompiled: losses, gradients and weights every 5 steps
    trial = create_trial(str(paths_under(tmp_path).tensors_dir))
    for collection in ("losses", "gradients", "weights"):
        (name, *_) = trial.tensor_names(collection=collection)
        assert trial.tensor(name).steps(mode=modes.TRAIN) == [0, 5, 10], collection
