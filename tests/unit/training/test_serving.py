"""The inference handler train.py writes into the model directory (retrain_training.serving)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

from retrain_contract import container as contract
from retrain_contract import serving as contract_serving
from retrain_training import data, evaluate, models, serving, train

LABELS = ["ant", "bee", "cat", "dog", "eel", "fox", "gnu"]
IMAGE_SIZE = 32


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """What a training job leaves in SM_MODEL_DIR for a seeded ResNet-18 over LABELS."""
    torch.manual_seed(3)
    args = train.get_args_parser().parse_args(["--model", "resnet18", "--image-size", str(IMAGE_SIZE)])
    paths = contract.resolve_paths({contract.BASE_DIR_ENV: str(tmp_path / "ml")})
    train.write_model(paths, args, models.build_model("resnet18", len(LABELS)).eval(), LABELS, {})
    return paths.model_dir


def image_bytes(seed: int, fmt: str = "JPEG", size: tuple[int, int] = (40, 30)) -> bytes:
    pixels = torch.Generator().manual_seed(seed)
    array = torch.randint(0, 256, (size[1], size[0], 3), generator=pixels, dtype=torch.uint8).numpy()
    out = io.BytesIO()
    Image.fromarray(array).save(out, format=fmt)
    return out.getvalue()


def test_the_model_directory_serves_from_its_own_code_as_evaluate_scores(
    model_dir: Path, tmp_path: Path
) -> None:
    # GIVEN a model directory as train.py writes it, and three images on disk
    images = []
    for seed in range(3):
        path = tmp_path / "images" / f"{seed}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(image_bytes(seed))
        images.append(path)
    # WHEN a fresh interpreter imports code/inference.py from the model directory alone (as the toolkit
    # does: code/ first on the path) and answers each image through the four handler functions
    script = f"""
import json, sys
sys.path.insert(0, {str(model_dir / contract_serving.CODE_DIR)!r})
import inference, retrain_training.serving as handler, retrain_training.models as models, retrain_contract
model = inference.model_fn({str(model_dir)!r})
answers = []
for path in {[str(p) for p in images]!r}:
    body = open(path, "rb").read()
    data = inference.input_fn(body, "image/jpeg")
    answers.append(json.loads(inference.output_fn(inference.predict_fn(data, model), "application/json")[0]))
modules = [m.__file__ for m in (inference, handler, models, retrain_contract)]
print(json.dumps({{"answers": answers, "modules": modules}}))
"""
    result = subprocess.run(
        [sys.executable, "-I", "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    served = json.loads(result.stdout)
    # THEN every module came from the model's code/ directory
    assert all(m.startswith(str(model_dir / contract_serving.CODE_DIR)) for m in served["modules"])
    # AND each answer is the top-5 of the labels, with the probabilities evaluate.py's logits give
    artifact = evaluate.load_artifact(model_dir, tmp_path)
    samples = [data.Sample(p, 0, p.name) for p in images]
    logits = evaluate.predict(
        evaluate.build(artifact, torch.device("cpu")),
        samples,
        image_size=IMAGE_SIZE,
        batch_size=2,
        num_workers=0,
        device=torch.device("cpu"),
    )
    for answer, row in zip(served["answers"], torch.softmax(logits, dim=1), strict=True):
        predictions = answer[contract_serving.PREDICTIONS_KEY]
        assert len(predictions) == contract_serving.TOP_K
        expected = row.topk(contract_serving.TOP_K)
        assert [p["label"] for p in predictions] == [LABELS[int(i)] for i in expected.indices]
        assert [p["probability"] for p in predictions] == pytest.approx(expected.values.tolist(), abs=1e-5)


def test_the_code_directory_carries_the_efficientnet_implementation_and_its_licence(model_dir: Path) -> None:
    code = model_dir / contract_serving.CODE_DIR
    assert (code / "efficientnet_lite_pytorch" / "model.py").is_file()
    assert "Apache" in (code / "efficientnet_lite_pytorch" / "LICENSE").read_text()


@pytest.mark.parametrize(
    ("body", "content_type", "status", "words"),
    [
        (b"", "image/jpeg", 400, "body is empty"),
        (b"label,pixels\n", "text/csv", 415, "content type 'text/csv' is not supported"),
        (b"not an image at all", "application/x-image", 400, "is not a readable image"),
        (image_bytes(1, "PNG"), "image/jpeg", 415, "says image/jpeg but its body is a PNG image"),
        (image_bytes(1)[:200], "image/jpeg", 400, "is not a readable image"),
    ],
)
def test_bad_requests_are_refused_with_a_status_and_what_to_send(
    body: bytes, content_type: str, status: int, words: str
) -> None:
    with pytest.raises(serving.RequestError) as refused:
        serving.input_fn(body, content_type)
    assert refused.value.status_code == status
    assert words in refused.value.message


def test_any_image_type_is_decoded_and_an_unserved_accept_is_refused(model_dir: Path, tmp_path: Path) -> None:
    # GIVEN a PNG (lossless: the pixels evaluate.py reads from the file are the ones sent)
    classifier = serving.model_fn(str(model_dir))
    png = tmp_path / "image.png"
    png.write_bytes(image_bytes(2, "PNG"))
    logits = evaluate.predict(
        evaluate.build(evaluate.load_artifact(model_dir, tmp_path), torch.device("cpu")),
        [data.Sample(png, 0, png.name)],
        image_size=IMAGE_SIZE,
        batch_size=1,
        num_workers=0,
        device=torch.device("cpu"),
    )
    expected = torch.softmax(logits, dim=1)[0].topk(contract_serving.TOP_K)
    # WHEN it is sent as a generic image and with its own type (and a parameter) THEN each answer is the
    # model's on those pixels
    for content_type in ("application/x-image", "image/png; charset=binary"):
        predictions = serving.predict_fn(serving.input_fn(png.read_bytes(), content_type), classifier)
        assert [p["label"] for p in predictions] == [LABELS[int(i)] for i in expected.indices]
        assert [p["probability"] for p in predictions] == pytest.approx(expected.values.tolist(), abs=1e-5)
    body, media = serving.output_fn(predictions, "text/csv, application/json;q=0.5")
    assert media == contract_serving.RESPONSE_TYPE
    assert json.loads(body) == {contract_serving.PREDICTIONS_KEY: predictions}
    with pytest.raises(serving.RequestError) as refused:
        serving.output_fn(predictions, "text/csv")
    assert refused.value.status_code == 406
