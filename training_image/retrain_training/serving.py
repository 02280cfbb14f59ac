"""The inference handler of a registered model: what SageMaker's PyTorch inference toolkit runs.

train.py writes it into the model directory (`write_code`), so the training job's model.tar.gz is the
package's model data as it is: `code/inference.py` (which re-exports the four functions below), this
module, the modules it imports (`models`, `augment`, the contract, EfficientNet-Lite's implementation)
beside model.pt and labels.json. The toolkit puts /opt/ml/model/code on the path, imports
SAGEMAKER_PROGRAM, calls `model_fn(model_dir)` once and, per request, `input_fn(body, content_type)`,
`predict_fn(data, model)` and `output_fn(prediction, accept)`. An image is prepared as evaluate.py
prepares a validation image (augment.eval_transform), so an endpoint answers what the evaluation
measured. Errors the caller can fix carry an HTTP status, as the toolkit's own errors do; SageMaker
returns them to the caller as InvokeEndpoint's ModelError with that OriginalStatusCode.
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from PIL import Image, UnidentifiedImageError
from torch import nn

from retrain_contract import container as contract
from retrain_contract import serving
from retrain_training import augment, models

try:  # the inference toolkit's error, whose status code it answers with
    from sagemaker_inference.errors import (  # type: ignore[import-not-found,unused-ignore]
        GenericInferenceToolkitError as _ToolkitError,
    )
except ImportError:  # outside the toolkit (evaluation, tests, the embedded endpoint)

    class _ToolkitError(Exception):  # type: ignore[no-redef]
        """The toolkit's GenericInferenceToolkitError: an HTTP status and a message for the caller."""

        def __init__(self, status_code: int, message: str | None = None, phrase: str | None = None) -> None:
            self.status_code = status_code
            self.message = message or "Invalid Request"
            self.phrase = phrase or self.message
            super().__init__(status_code, self.message, self.phrase)


class RequestError(_ToolkitError):
    """A request the handler cannot answer; `status_code` is the HTTP status the caller gets."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(status_code, message, message)


BAD_REQUEST = 400
NOT_ACCEPTABLE = 406
UNSUPPORTED_MEDIA_TYPE = 415
ENTRY_POINT = Path(__file__).resolve().parents[1] / serving.PROGRAM  # training_image/inference.py
EFFICIENTNET_DISTRIBUTION = "efficientnet-lite-pytorch"


@dataclass(frozen=True)
class Classifier:
    """What model_fn loads: the network, the labels of its outputs, its input size."""

    model: nn.Module
    labels: list[str]
    image_size: int
    device: torch.device


def model_fn(model_dir: str) -> Classifier:
    """model.pt of train.py (architecture, labels, input size, weights), ready for inference."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    path = Path(model_dir) / contract.MODEL_FILE
    artifact: Any = torch.load(path, map_location=device, weights_only=True)
    labels = [str(label) for label in artifact["labels"]]
    model = models.build_model(str(artifact["arch"]), len(labels))
    model.load_state_dict(artifact["state_dict"])
    return Classifier(model.to(device).eval(), labels, int(artifact["image_size"]), device)


def _media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def input_fn(body: bytes | bytearray, content_type: str | None) -> Image.Image:
    """The request's image, decoded and checked; a request that is not one JPEG or PNG image is refused
    with a status and a message that says what to send."""
    media = _media_type(content_type)
    supported = ", ".join(serving.CONTENT_TYPES)
    if media not in serving.CONTENT_TYPES:
        raise RequestError(
            UNSUPPORTED_MEDIA_TYPE,
            f"content type {content_type!r} is not supported: send the bytes of one image as {supported}",
        )
    if not body:
        raise RequestError(BAD_REQUEST, "the request body is empty: send the bytes of one JPEG or PNG image")
    try:
        with Image.open(io.BytesIO(bytes(body))) as opened:
            found = opened.format or "unknown"
            opened.load()
            image = opened.convert("RGB")
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, SyntaxError, ValueError) as error:
        raise RequestError(
            BAD_REQUEST,
            f"the request body ({len(body)} bytes, content type {media}) is not a readable image: {error}; "
            "send the bytes of one JPEG or PNG image",
        ) from None
    promised = serving.CONTENT_TYPE_FORMATS.get(media)
    if promised is not None and found != promised:
        raise RequestError(
            UNSUPPORTED_MEDIA_TYPE,
            f"the request says {media} but its body is a {found} image: send it as "
            f"{serving.CONTENT_TYPE_ANY_IMAGE} or with its own content type",
        )
    return image


def predict_fn(image: Image.Image, classifier: Classifier) -> list[serving.Prediction]:
    """The TOP_K most probable labels of one image, prepared as a validation image is
    (augment.eval_transform)."""
    batch = augment.eval_transform(image, classifier.image_size).unsqueeze(0).to(classifier.device)
    with torch.inference_mode():
        logits = classifier.model(batch).float()
    return top_predictions(torch.softmax(logits, dim=1)[0].cpu(), classifier.labels, serving.TOP_K)


def top_predictions(probabilities: torch.Tensor, labels: list[str], k: int) -> list[serving.Prediction]:
    """The k most probable labels, most probable first."""
    values, indices = probabilities.topk(min(k, len(labels)))
    return [
        {"label": labels[int(i)], "probability": float(v)}
        for v, i in zip(values.tolist(), indices.tolist(), strict=True)
    ]


def output_fn(prediction: list[serving.Prediction], accept: str | None) -> tuple[bytes, str]:
    """The predictions as JSON, the one type the model answers (any accept that allows it)."""
    accepted = {_media_type(part) for part in (accept or "").split(",")}
    if not accepted & {"", "*/*", "application/*", serving.RESPONSE_TYPE}:
        raise RequestError(
            NOT_ACCEPTABLE, f"accept {accept!r} is not supported: the model answers {serving.RESPONSE_TYPE}"
        )
    return json.dumps({serving.PREDICTIONS_KEY: prediction}).encode(), serving.RESPONSE_TYPE


def write_code(model_dir: Path) -> Path:
    """Lay out model_dir/code: the entry point and every module the handler imports beyond the
    inference image's own packages (torch, numpy, Pillow), so model.tar.gz serves as it is."""
    code = model_dir / serving.CODE_DIR
    shutil.rmtree(code, ignore_errors=True)
    code.mkdir(parents=True)
    shutil.copy2(ENTRY_POINT, code / serving.PROGRAM)
    package = code / "retrain_training"
    package.mkdir()
    for module in (Path(__file__), Path(models.__file__), Path(augment.__file__)):
        shutil.copy2(module, package / module.name)
    contract_dir = Path(contract.__file__).parent
    shutil.copytree(contract_dir, code / contract_dir.name, ignore=shutil.ignore_patterns("__pycache__"))
    _copy_distribution(EFFICIENTNET_DISTRIBUTION, code)
    return code


def _copy_distribution(name: str, into: Path) -> None:
    """An installed pure-Python distribution's modules and its licence (Apache-2.0 asks for it)."""
    distribution = importlib.metadata.distribution(name)
    for file in distribution.files or []:
        source = Path(str(distribution.locate_file(file)))
        parts = file.parts
        if file.suffix == ".py" and ".dist-info" not in parts[0]:
            target = into / Path(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
        elif ".dist-info" in parts[0] and file.name in ("LICENSE", "LICENSE.txt"):
            top = into / (distribution.read_text("top_level.txt") or "").split()[0]
            top.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, top / file.name)
