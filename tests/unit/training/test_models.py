from __future__ import annotations

from pathlib import Path

import pytest
import torch

from retrain_training import models

# A few of torchvision's resnet50 state_dict keys, copied from torchvision.models.resnet50().state_dict().
TORCHVISION_RESNET50_KEYS = [
    "conv1.weight",
    "bn1.running_mean",
    "bn1.num_batches_tracked",
    "layer1.0.conv1.weight",
    "layer1.0.conv3.weight",
    "layer1.0.bn3.running_var",
    "layer1.0.downsample.0.weight",
    "layer1.0.downsample.1.weight",
    "layer2.3.bn2.bias",
    "layer3.5.conv2.weight",
    "layer4.2.bn3.weight",
    "fc.weight",
    "fc.bias",
]
TORCHVISION_RESNET18_KEYS = [
    "layer1.1.conv2.weight",
    "layer2.0.downsample.0.weight",
    "layer4.1.bn2.running_mean",
]


@pytest.mark.parametrize(
    ("arch", "parameters", "keys"),
    [
        ("resnet18", 11_689_512, TORCHVISION_RESNET18_KEYS),
        ("resnet34", 21_797_672, ["layer3.5.conv2.weight"]),
        ("resnet50", 25_557_032, TORCHVISION_RESNET50_KEYS),
    ],
)
def test_architecture_matches_torchvision(arch: str, parameters: int, keys: list[str]) -> None:
    # GIVEN the 1000-class model WHEN built THEN it has torchvision's parameter count and key names
    model = models.build_model(arch, 1000)
    assert sum(p.numel() for p in model.parameters()) == parameters
    assert set(keys) <= set(model.state_dict())


def test_pretrained_weights_load_with_a_new_head_for_fewer_labels(tmp_path: Path) -> None:
    # GIVEN ImageNet-shaped weights saved as a bare state_dict (how torchvision publishes them)
    published = models.build_model("resnet18", 1000)
    torch.save(published.state_dict(), tmp_path / "resnet18.pth")
    model = models.build_model("resnet18", 3)
    head_before = model.fc.weight.clone()
    # WHEN loaded into a 3-label model
    skipped = models.load_pretrained(model, models.read_state_dict(tmp_path / "resnet18.pth"))
    # THEN the backbone is the published one and the head stays new
    assert skipped == ["fc.weight", "fc.bias"]
    assert torch.equal(model.layer4[1].conv2.weight, published.layer4[1].conv2.weight)
    assert torch.equal(model.fc.weight, head_before)


def test_weights_of_another_architecture_are_refused_with_the_keys() -> None:
    # GIVEN resnet50 weights WHEN loaded into resnet18 THEN the error names the problem and the fix
    with pytest.raises(models.ModelError, match="check that the 'model' hyperparameter"):
        models.load_pretrained(
            models.build_model("resnet18", 2), models.build_model("resnet50", 2).state_dict()
        )


def test_unknown_architecture_is_refused() -> None:
    with pytest.raises(models.ModelError, match="resnet18, resnet34, resnet50"):
        models.build_model("vgg16", 2)


def test_missing_weights_file_says_where_to_put_it(tmp_path: Path) -> None:
    with pytest.raises(models.ModelError, match="pretrained channel"):
        models.read_state_dict(tmp_path / "absent.pth")


def test_frozen_backbone_trains_only_the_head_and_keeps_batchnorm_statistics() -> None:
    # GIVEN a model with its backbone frozen
    model = models.build_model("resnet18", 2)
    models.set_backbone_frozen(model, True)
    models.train_mode(model, frozen_statistics=True)
    running_mean = model.bn1.running_mean.clone()
    # WHEN a training step runs
    model(torch.randn(4, 3, 32, 32)).sum().backward()
    # THEN only the head has gradients and BatchNorm statistics did not move
    assert [n for n, p in model.named_parameters() if p.grad is not None] == ["fc.weight", "fc.bias"]
    assert torch.equal(model.bn1.running_mean, running_mean)
    # AND unfreezing makes every parameter trainable again
    models.set_backbone_frozen(model, False)
    assert all(p.requires_grad for p in model.parameters())
