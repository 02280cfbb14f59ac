"""The champion on a run's new uploads (evaluate.py --split arrivals): scored on the new images and on its
validation images apart, the suspects among the new ones, and the run's manifest held without them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from retrain_contract import container as contract
from retrain_training import data, evaluate, label_check, models

MODEL_LABELS = ["cat", "dog", "eel"]
# each label's images are one colour (with noise): a head fitted on a random backbone's features tells
# them apart without fail, so what the model predicts is known by hand
COLOURS = {"cat": (220, 40, 40), "dog": (40, 200, 40), "eel": (40, 40, 220), "fox": (220, 220, 40)}
IMAGE_SIZE = 32
CPU = torch.device("cpu")
# the new uploads: 10 cats, 10 dogs, no eel, 4 foxes (a label the model lacks), 3 red (cat) images given
# the label dog and a blue (eel) one given cat; the validation images: 10 of each label the model has, one
# green (dog) image given the label eel. Only the validation images give eel its threshold.
NEW_LABELS = ["cat", "dog"]
PLANTED_NEW = {
    "dog/swap-0.jpg": "cat",
    "dog/swap-1.jpg": "cat",
    "dog/swap-2.jpg": "cat",
    "cat/swap-3.jpg": "eel",
}
PLANTED_VALIDATION = {"eel/val-swap-0.jpg": "dog"}


def _image(path: Path, colour: str, rng: np.random.Generator) -> None:
    pixels = np.array(COLOURS[colour], dtype=np.int16) + rng.integers(-25, 26, (IMAGE_SIZE, IMAGE_SIZE, 3))
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(path, quality=95)


def _line(path: str, label: str, split: str) -> str:
    return json.dumps({"path": path, "label": label, "split": split}) + "\n"


def _fit_head(model: torch.nn.Module, root: Path, rng: np.random.Generator) -> None:
    """Least squares of the random backbone's features onto the labels, scaled to confident logits."""
    samples = []
    for index, label in enumerate(MODEL_LABELS):
        for i in range(12):
            _image(root / label / f"fit-{i}.jpg", label, rng)
            samples.append(data.Sample(root / label / f"fit-{i}.jpg", index, f"{label}/fit-{i}.jpg"))
    head = model.fc
    model.fc = torch.nn.Identity()
    options = {"image_size": IMAGE_SIZE, "batch_size": 64, "num_workers": 0, "device": CPU}
    features = evaluate.predict(model.eval(), samples, **options).double()
    design = torch.cat([features, torch.ones(len(samples), 1, dtype=torch.float64)], dim=1)
    targets = torch.nn.functional.one_hot(torch.tensor([s.label for s in samples]), 3).double()
    solution = torch.linalg.lstsq(design, targets, driver="gelsd").solution * 20
    with torch.no_grad():
        head.weight.copy_(solution[:-1].T.float())
        head.bias.copy_(solution[-1].float())
    model.fc = head


@pytest.fixture(scope="module")
def champion(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A champion (model.pt as train.py writes it) of cat, dog and eel, the images, and the arrivals."""
    root = tmp_path_factory.mktemp("arrivals")
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    model = models.build_model("resnet18", len(MODEL_LABELS))
    _fit_head(model, root / "fit", rng)
    (root / "model").mkdir()
    torch.save(
        {
            "arch": "resnet18",
            "labels": MODEL_LABELS,
            "image_size": IMAGE_SIZE,
            "state_dict": model.state_dict(),
        },
        root / "model" / contract.MODEL_FILE,
    )
    images = root / "data"
    lines = []
    for label in MODEL_LABELS:
        for i in range(10):
            _image(images / label / f"val-{i}.jpg", label, rng)
            lines.append(_line(f"{label}/val-{i}.jpg", label, contract.SPLIT_VALIDATION))
            if label in NEW_LABELS:
                _image(images / label / f"new-{i}.jpg", label, rng)
                lines.append(_line(f"{label}/new-{i}.jpg", label, contract.SPLIT_NEW))
    for i in range(4):
        _image(images / "fox" / f"new-{i}.jpg", "fox", rng)
        lines.append(_line(f"fox/new-{i}.jpg", "fox", contract.SPLIT_NEW))
    for planted, split in (
        (PLANTED_NEW, contract.SPLIT_NEW),
        (PLANTED_VALIDATION, contract.SPLIT_VALIDATION),
    ):
        for key, colour in planted.items():
            _image(images / key, colour, rng)
            lines.append(_line(key, key.split("/")[0], split))
    (root / "arrivals.jsonl").write_text("".join(lines), encoding="utf-8")
    return {"root": root, "model": root / "model", "data": images, "manifest": root / "arrivals.jsonl"}


def _argv(champion: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return ["--model", str(champion["model"]), "--data", str(champion["data"]), "--manifest",
            str(champion["manifest"]), "--split", contract.SPLIT_ARRIVALS, "--output", str(out),
            *extra]  # fmt: skip


def _run(champion: dict[str, Path], out: Path, monkeypatch: pytest.MonkeyPatch, *extra: str) -> int:
    monkeypatch.setenv(contract.BASE_DIR_ENV, str(out.parent / "base"))
    return evaluate.run(_argv(champion, out, *extra))


def test_the_champion_predicts_each_image_by_its_colour(champion: dict[str, Path]) -> None:
    # the premise of the hand-computed figures below: the model's own predictions are the colours
    artifact = evaluate.load_artifact(champion["model"], champion["root"])
    model = evaluate.build(artifact, CPU)
    records = [json.loads(line) for line in champion["manifest"].read_text().splitlines()]
    colours = [{**PLANTED_NEW, **PLANTED_VALIDATION}.get(r["path"], r["path"].split("/")[0]) for r in records]
    samples = [data.Sample(champion["data"] / r["path"], 0, r["path"]) for r in records]
    logits = evaluate.predict(model, samples, image_size=IMAGE_SIZE, batch_size=64, num_workers=0, device=CPU)
    predicted = [MODEL_LABELS[i] for i in logits.argmax(dim=1).tolist()]
    assert [p for p, c in zip(predicted, colours, strict=True) if c != "fox"] == [
        c for c in colours if c != "fox"
    ]


@pytest.fixture
def evaluated(champion: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The output folder of the champion's evaluation on the arrivals (which succeeded)."""
    out = tmp_path / "out"
    assert _run(champion, out, monkeypatch) == 0
    return out


def test_the_champion_is_scored_on_the_new_uploads_and_on_its_validation_images_apart(
    evaluated: Path,
) -> None:
    # WHEN the champion is evaluated on the arrivals (`evaluated`)
    result = json.loads((evaluated / contract.ARRIVALS_FILE).read_text())
    # THEN by hand from its predictions (the colours): of the 28 new images, 20 are right; the 4 foxes (a
    # label it lacks), the 3 red dogs and the blue cat are wrong. Of the 31 validation images, the green
    # eel is wrong
    assert result["new"]["samples"] == 28 and result["new"]["top1"] == pytest.approx(20 / 28)
    assert result["validation"]["samples"] == 31 and result["validation"]["top1"] == pytest.approx(30 / 31)
    assert result["drift"] == pytest.approx(30 / 31 - 20 / 28)
    assert result["new"]["per_class"]["fox"] == {"precision": 0.0, "recall": 0.0, "support": 4}
    assert result["labels_the_model_lacks"] == ["fox"]
    # AND the document is arrivals.json's shape, its label check over the new images of known labels only
    assert set(result) == {"new", "validation", "drift", "suspects", "held", "labels_the_model_lacks",
                           "model", "method"}  # fmt: skip
    assert result["held"] == 0 and result["method"] == label_check.METHOD.format(label_check.DEFAULT_FILTER)
    assert result["model"].endswith(contract.MODEL_FILE)
    assert set(result["suspects"]) == {"images_checked", "suspect_count", "per_label"}
    assert result["suspects"]["images_checked"] == 24
    assert result["suspects"]["per_label"] == {
        "cat": {"images": 11, "suspects": 1, "rate": 1 / 11},
        "dog": {"images": 13, "suspects": 3, "rate": 3 / 13},
    }
    # AND no evaluation.json: the gate must never read this job's figures as a candidate's
    assert not (evaluated / contract.EVALUATION_FILE).exists()


def test_the_planted_swaps_among_the_new_uploads_are_the_suspects(evaluated: Path) -> None:
    document = json.loads((evaluated / contract.SUSPECTS_FILE).read_text())
    # THEN the three red dogs and the blue cat are listed, each with the label its colour is (the blue
    # cat's eel by the validation images' threshold: no new upload is an eel); the green eel of the
    # validation images is not (only the new uploads' suspects are kept), nor is any clean image
    assert {s["key"]: s["suggested"] for s in document["suspects"]} == PLANTED_NEW
    assert all(s["given"] == s["key"].split("/")[0] for s in document["suspects"])
    assert document["suspect_count"] == 4 and document["images_checked"] == 24
    summary = json.loads((evaluated / contract.ARRIVALS_FILE).read_text())["suspects"]
    assert summary == {key: document[key] for key in ("images_checked", "suspect_count", "per_label")}


def test_hold_drops_exactly_the_suspects_lines_from_the_runs_manifest(
    champion: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the run's manifest: the new and validation lines, training lines, a suspect repeated (a boost),
    # lines written another way (spacing, a CRLF end, a blank line)
    run_lines = [
        _line("cat/old-0.jpg", "cat", contract.SPLIT_TRAIN),
        _line("dog/swap-0.jpg", "dog", contract.SPLIT_TRAIN),
        _line("dog/swap-0.jpg", "dog", contract.SPLIT_TRAIN),
        '{"path":  "dog/new-3.jpg", "label": "dog"}\r\n',
        "\n",
        _line("dog/swap-1.jpg", "dog", contract.SPLIT_TRAIN),
        _line("eel/val-swap-0.jpg", "eel", contract.SPLIT_VALIDATION),
        _line("dog/swap-2.jpg", "dog", contract.SPLIT_VALIDATION),
        _line("cat/swap-3.jpg", "cat", contract.SPLIT_TRAIN),
        _line("eel/new-1.jpg", "eel", contract.SPLIT_TRAIN).rstrip("\n"),  # no end of line at the end
    ]
    run_manifest = tmp_path / "run" / contract.MANIFEST_FILE
    run_manifest.parent.mkdir()
    run_manifest.write_bytes("".join(run_lines).encode("utf-8"))
    # AND suspects.json lists only the first of them
    monkeypatch.setattr(contract, "SUSPECTS_MAX", 1)
    # WHEN the champion's evaluation holds the suspects
    out, held = tmp_path / "out", tmp_path / "held"
    argv = ["--hold-manifest", str(run_manifest), "--held-output", str(held)]
    assert _run(champion, out, monkeypatch, *argv) == 0
    # THEN the held manifest is the run's without every suspect's lines, the rest byte for byte
    kept = [line for line in run_lines if not any(key in line for key in PLANTED_NEW)]
    assert (held / contract.MANIFEST_FILE).read_bytes() == "".join(kept).encode("utf-8")
    # AND the count is of distinct paths, all four though one is listed
    result = json.loads((out / contract.ARRIVALS_FILE).read_text())
    assert (
        result["held"] == 4 and len(json.loads((out / contract.SUSPECTS_FILE).read_text())["suspects"]) == 1
    )


def test_hold_without_its_output_fails_naming_it(
    champion: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    assert _run(champion, out, monkeypatch, "--hold-manifest", str(champion["manifest"])) == 1
    reason = (tmp_path / "base" / "output" / contract.FAILURE_FILE).read_text()
    assert "--hold-manifest needs --held-output" in reason
    assert not (out / contract.ARRIVALS_FILE).exists()


def test_arrivals_without_a_new_line_fail_naming_the_manifest(
    champion: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = tmp_path / "only-validation.jsonl"
    manifest.write_text(_line("cat/val-0.jpg", "cat", contract.SPLIT_VALIDATION))
    args = evaluate.get_args_parser(tmp_path).parse_args(
        [*_argv(champion, tmp_path / "out"), "--manifest", str(manifest)]
    )
    with pytest.raises(evaluate.EvaluationError, match=f"{manifest} has no 'new' line"):
        evaluate.evaluate(args, tmp_path)
