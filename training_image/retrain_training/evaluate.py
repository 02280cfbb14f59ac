"""SageMaker Processing entry point: evaluate a trained model (or a training checkpoint) on a data set.

Inputs and outputs are arguments defaulting under `<SAGEMAKER_BASE_DIR or /opt/ml>/processing/`.
Computes top-1 (with its 95% Wilson interval) and top-3 accuracy, per-class precision and recall and the
confusion matrix, optionally for a baseline (champion) model on the same images, and writes
contract.EVALUATION_FILE and contract.CONFUSION_MATRIX_FILE. With --suspects, the images whose given label
the model finds unlikely (label_check.py: confident learning on its probabilities, which must be out of
sample: a champion on uploads it never trained on) go to contract.SUSPECTS_FILE.

With --split arrivals, the model is the champion and --manifest the run's arrivals (freeze.py): lines of
split "new" (the run's new uploads, out of sample for it) and "validation" (its own yardstick). It is
scored on each apart, the label check runs over both (every label has images for its threshold) and lists
the suspects among the new uploads: contract.ARRIVALS_FILE and contract.SUSPECTS_FILE, no evaluation.json.
With --hold-manifest and --held-output, the run's manifest is also copied without the suspects' lines.
On failure: the reason in the failure file and a non-zero exit.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from retrain_contract import container as contract
from retrain_training import checkpoints, data, label_check, loaders, models

log = logging.getLogger("evaluate")
SPLITS = ("validation", "all", contract.SPLIT_ARRIVALS)
ARCHIVE = "model.tar.gz"
DEFAULT_VAL_FRACTION = contract.VAL_FRACTION_DEFAULT


class EvaluationError(Exception):
    """Inputs that cannot be evaluated; the message names the input and what to do."""


@dataclass
class Artifact:
    arch: str
    labels: list[str]
    image_size: int
    state_dict: dict[str, torch.Tensor]
    source: Path
    checkpoint_step: int | None = None
    val_fraction: float | None = None  # from the training job's config.json, when it is beside the model
    training_skipped: list[dict[str, str]] = field(default_factory=list)  # files training could not decode


def get_args_parser(base: Path) -> argparse.ArgumentParser:
    processing = base / "processing"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model",
        type=Path,
        default=processing / "model",
        help=f"directory with {ARCHIVE} or {contract.MODEL_FILE}, or one such file, or a checkpoint",
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=processing / "data",
        help=f"<label>/<file> images, or a directory holding {contract.MANIFEST_FILE}",
    )
    parser.add_argument(
        "--manifest", type=Path, default=None, help="JSON lines manifest (paths relative to --data)"
    )
    parser.add_argument(
        "--split",
        choices=SPLITS,
        default="validation",
        help="validation: only the images training hashed into validation; all: every image; "
        f"{contract.SPLIT_ARRIVALS}: the champion on a run's new uploads (--manifest: their lines)",
    )
    parser.add_argument(
        "--val-fraction",
        type=float,
        default=None,
        help="the training job's val-fraction (default: from its config.json, else 0.2)",
    )
    parser.add_argument(
        "--baseline", type=Path, default=None, help="champion model to compare on the same images"
    )
    parser.add_argument(
        "--suspects",
        action="store_true",
        help=f"also list the images whose label the model finds unlikely ({contract.SUSPECTS_FILE})",
    )
    parser.add_argument(
        "--hold-manifest",
        type=Path,
        default=None,
        help=f"with --split {contract.SPLIT_ARRIVALS}: the run's manifest, to copy without the suspects",
    )
    parser.add_argument(
        "--held-output",
        type=Path,
        default=None,
        help=f"where --hold-manifest's copy goes (<dir>/{contract.MANIFEST_FILE})",
    )
    parser.add_argument("--output", type=Path, default=processing / "evaluation")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--num-workers", type=int, default=0)
    return parser


def _extract(archive: Path, into: Path) -> Path:
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(into, filter="data")
    except (tarfile.TarError, OSError) as error:
        raise EvaluationError(f"cannot extract {archive}: {error}") from error
    found = sorted(into.rglob(contract.MODEL_FILE))
    if not found:
        raise EvaluationError(
            f"{archive} holds no {contract.MODEL_FILE}; is it a training job's model artifact?"
        )
    return found[0]


def load_artifact(path: Path, workdir: Path) -> Artifact:
    """A model.pt, a model.tar.gz (or a directory with one of them), or a training checkpoint."""
    if path.is_dir():
        if (path / ARCHIVE).is_file():
            path = path / ARCHIVE
        elif (path / contract.MODEL_FILE).is_file():
            path = path / contract.MODEL_FILE
        else:
            raise EvaluationError(f"model directory {path} has neither {ARCHIVE} nor {contract.MODEL_FILE}")
    if not path.is_file():
        raise EvaluationError(f"model {path} does not exist")
    if path.name.endswith(".tar.gz"):
        path = _extract(path, Path(tempfile.mkdtemp(dir=workdir)))
    step = checkpoints.step_of(path)
    if step is not None:
        state = checkpoints.decode(path.read_bytes(), source=str(path))
        return Artifact(
            state["arch"],
            list(state["labels"]),
            int(state["image_size"]),
            state["model"],
            path,
            step,
            float(state["args"].get("val_fraction", DEFAULT_VAL_FRACTION)),
        )
    try:
        loaded: Any = torch.load(path, map_location="cpu", weights_only=True)
        artifact = Artifact(
            loaded["arch"], list(loaded["labels"]), int(loaded["image_size"]), loaded["state_dict"], path
        )
    except Exception as error:
        raise EvaluationError(f"{path} is not a model written by train.py: {error}") from error
    config = path.parent / contract.CONFIG_FILE
    if config.is_file():
        written = json.loads(config.read_text(encoding="utf-8"))
        hyperparameters = written.get("hyperparameters", {})
        if contract.HP_VAL_FRACTION in hyperparameters:
            artifact.val_fraction = float(hyperparameters[contract.HP_VAL_FRACTION])
        artifact.training_skipped = [dict(item) for item in written.get("skipped", [])]
    return artifact


def build(artifact: Artifact, device: torch.device) -> torch.nn.Module:
    model = models.build_model(artifact.arch, len(artifact.labels))
    model.load_state_dict(artifact.state_dict)
    return model.to(device).eval()


def collect(
    data_dir: Path, manifest: Path | None, *, split: str, val_fraction: float
) -> list[tuple[Path, str, str]]:
    """(path, relative key, label) of each distinct decodable image in the chosen split."""
    if not data_dir.is_dir():
        raise EvaluationError(f"data directory {data_dir} does not exist")
    if manifest is None and (data_dir / contract.MANIFEST_FILE).is_file():
        manifest = data_dir / contract.MANIFEST_FILE
    entries = data.read_manifest(manifest) if manifest is not None else data.scan_folders(data_dir)
    distinct = list(dict(entries).items())  # a path repeated to boost a class is evaluated once
    if split == "validation":
        is_validation = data.validation_rule(data.manifest_splits(manifest) if manifest else {}, val_fraction)
        distinct = [(key, label) for key, label in distinct if is_validation(key)]
    skipped: list[tuple[str, str]] = []
    kept = data.decodable(distinct, data_dir, skipped)
    if not kept:
        raise EvaluationError(f"no decodable images in {manifest or data_dir} for split '{split}'")
    return kept


def predict(
    model: torch.nn.Module,
    samples: Sequence[data.Sample],
    *,
    image_size: int,
    batch_size: int,
    num_workers: int,
    device: torch.device,
) -> torch.Tensor:
    loader = loaders.TorchLoader(
        samples,
        train=False,
        batch_size=batch_size,
        image_size=image_size,
        augment_load=1,
        seed=0,
        num_workers=num_workers,
        device=device,
    )
    outputs = []
    with torch.inference_mode():
        for images, _ in loader.epoch(0):
            outputs.append(model(images.to(device)).float().cpu())
    return torch.cat(outputs)


def metrics(
    logits: torch.Tensor, targets: np.ndarray, labels: list[str], predicted_labels: list[str]
) -> dict[str, Any]:
    """Top-1/top-3 accuracy, per-class precision/recall and the confusion matrix (rows: true label,
    columns: predicted label; beyond DENSE_CONFUSION_MAX_LABELS labels the most frequent confusions,
    [true, predicted, count]) over `labels`. `predicted_labels` names the model's outputs; an output
    outside `labels` (a baseline's label the candidate lacks) counts as wrong."""
    index = {label: i for i, label in enumerate(labels)}
    remap = np.array([index.get(label, -1) for label in predicted_labels])
    ranked = remap[logits.topk(min(3, logits.shape[1]), dim=1).indices.numpy()]
    top1 = ranked[:, 0]
    n = len(labels)
    known = top1 >= 0
    # per label in one pass each (bincount), never a loop over the labels: catalogues have thousands
    support = np.bincount(targets, minlength=n)
    predicted = np.bincount(top1[known], minlength=n)
    hits = np.bincount(targets[top1 == targets], minlength=n)
    per_class = {
        label: {
            "precision": int(hits[i]) / int(predicted[i]) if predicted[i] else 0.0,
            "recall": int(hits[i]) / int(support[i]) if support[i] else 0.0,
            "support": int(support[i]),
        }
        for i, label in enumerate(labels)
    }
    # the confusions as (true, predicted) codes: an n x n matrix only for few labels
    pairs, counts = np.unique(targets[known].astype(np.int64) * n + top1[known], return_counts=True)
    confusion: dict[str, Any] = {}
    if n <= contract.DENSE_CONFUSION_MAX_LABELS:
        matrix = np.zeros(n * n, dtype=np.int64)
        matrix[pairs] = counts
        confusion["confusion_matrix"] = matrix.reshape(n, n).tolist()
    else:
        wrong = pairs // n != pairs % n
        order = np.argsort(-counts[wrong], kind="stable")[: contract.CONFUSION_PAIRS_MAX]
        confusion["confusions"] = [
            [labels[int(code) // n], labels[int(code) % n], int(count)]
            for code, count in zip(pairs[wrong][order], counts[wrong][order], strict=True)
        ]
    return {
        "top1": float((top1 == targets).mean()),
        "top1_interval": list(label_check.wilson_interval(int((top1 == targets).sum()), len(targets))),
        "top3": float((ranked == targets[:, None]).any(axis=1).mean()),
        "per_class": per_class,
        **confusion,
        "labels": labels,
        "samples": len(targets),
    }


def checkable(
    logits: torch.Tensor, samples: Sequence[data.Sample], known: int
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(given labels, probabilities, keys) of the images whose label the model has (the scoring labels
    list the model's first, so a sample's label index below `known` is the model's output of it)."""
    kept = [i for i, s in enumerate(samples) if s.label < known]
    given = np.array([samples[i].label for i in kept], dtype=np.int64)
    probabilities = torch.softmax(logits[kept], dim=1).numpy() if kept else np.zeros((0, known))
    return given, probabilities, [samples[i].key for i in kept]


def suspects(
    logits: torch.Tensor, samples: Sequence[data.Sample], model_labels: list[str], known: int
) -> dict[str, Any]:
    """suspects.json of the images whose label the model has."""
    given, probabilities, keys = checkable(logits, samples, known)
    found = label_check.find_suspects(given, probabilities, model_labels, keys)
    return label_check.report(found, given, model_labels, limit=contract.SUSPECTS_MAX)


def scoring_labels(model_labels: list[str], present: set[str]) -> tuple[list[str], list[str]]:
    """The labels an evaluation scores over: the model's, then those of the images it was not trained on
    (returned apart). Every image counts, so a champion that lacks a label the data set gained is held to
    the same images as the challenger that learnt it: the images of that label count as wrong."""
    unknown = sorted(present - set(model_labels))
    return [*model_labels, *unknown], unknown


def plot_confusion(matrix: list[list[int]], labels: list[str], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = max(4.0, 0.5 * len(labels) + 2)
    figure, axes = plt.subplots(figsize=(size, size))
    image = axes.imshow(np.asarray(matrix), cmap="Blues")
    axes.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    axes.set_yticks(range(len(labels)), labels)
    axes.set_xlabel("predicted")
    axes.set_ylabel("true")
    for (row, column), value in np.ndenumerate(np.asarray(matrix)):
        axes.text(column, row, str(value), ha="center", va="center", fontsize=8)
    figure.colorbar(image)
    figure.tight_layout()
    figure.savefig(out, dpi=100)
    plt.close(figure)


def check_arguments(args: argparse.Namespace) -> None:
    """The combinations argparse cannot refuse: --hold-manifest and --held-output go together, and only
    with --split arrivals, which compares no baseline."""
    hold = {"--hold-manifest": args.hold_manifest, "--held-output": args.held_output}
    given = [name for name, value in hold.items() if value is not None]
    if len(given) == 1:
        [missing] = [name for name in hold if name not in given]
        raise EvaluationError(f"{given[0]} needs {missing}: give both or neither")
    arrivals = args.split == contract.SPLIT_ARRIVALS
    if given and not arrivals:
        raise EvaluationError(f"--hold-manifest applies to --split {contract.SPLIT_ARRIVALS} only")
    if arrivals and args.baseline is not None:
        raise EvaluationError(f"--baseline does not apply to --split {contract.SPLIT_ARRIVALS}")
    if args.hold_manifest is not None and not args.hold_manifest.is_file():
        raise EvaluationError(f"--hold-manifest {args.hold_manifest} does not exist")


def read_arrivals(manifest: Path) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(key, label) of the new images and of the validation images of an arrivals manifest, each path
    once (a path that is both counts as new)."""
    found: dict[str, dict[str, str]] = {contract.SPLIT_NEW: {}, contract.SPLIT_VALIDATION: {}}
    for number, line in enumerate(manifest.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            key = str(record[contract.MANIFEST_PATH_KEY]).lstrip("/")
            label, split = str(record[contract.MANIFEST_LABEL_KEY]), record[contract.MANIFEST_SPLIT_KEY]
        except (ValueError, KeyError, TypeError) as error:
            raise EvaluationError(
                f"arrivals manifest {manifest} line {number} is not a JSON object with "
                f"'{contract.MANIFEST_PATH_KEY}', '{contract.MANIFEST_LABEL_KEY}' and "
                f"'{contract.MANIFEST_SPLIT_KEY}': {error}"
            ) from error
        if split not in found:
            raise EvaluationError(
                f"arrivals manifest {manifest} line {number}: '{contract.MANIFEST_SPLIT_KEY}' is {split!r}; "
                f"give '{contract.SPLIT_NEW}' or '{contract.SPLIT_VALIDATION}'"
            )
        found[split].setdefault(key, label)
    new = found[contract.SPLIT_NEW]
    if not new:
        raise EvaluationError(
            f"arrivals manifest {manifest} has no '{contract.SPLIT_NEW}' line: no new upload to evaluate on"
        )
    validation = [(key, label) for key, label in found[contract.SPLIT_VALIDATION].items() if key not in new]
    return list(new.items()), validation


def hold(manifest: Path, output: Path, suspected: set[str]) -> int:
    """Copy the run's manifest to `output`/manifest.jsonl without the lines of suspected paths, the other
    lines byte for byte; the number of distinct paths left out."""
    removed: set[str] = set()
    kept: list[bytes] = []
    for number, line in enumerate(manifest.read_bytes().splitlines(keepends=True), start=1):
        if line.strip():
            try:
                key = str(json.loads(line)[contract.MANIFEST_PATH_KEY]).lstrip("/")
            except (ValueError, KeyError, TypeError) as error:
                raise EvaluationError(
                    f"run manifest {manifest} line {number} names no path: {error}"
                ) from error
            if key in suspected:
                removed.add(key)
                continue
        kept.append(line)
    output.mkdir(parents=True, exist_ok=True)
    (output / contract.MANIFEST_FILE).write_bytes(b"".join(kept))
    return len(removed)


def arrivals_manifest(args: argparse.Namespace) -> Path:
    manifest: Path | None = args.manifest
    if manifest is None and (args.data / contract.MANIFEST_FILE).is_file():
        manifest = args.data / contract.MANIFEST_FILE
    if manifest is None or not manifest.is_file():
        raise EvaluationError(
            f"--split {contract.SPLIT_ARRIVALS} reads the run's arrivals lines: give --manifest "
            f"(not found: {manifest or args.data / contract.MANIFEST_FILE})"
        )
    return manifest


def arrival_images(
    args: argparse.Namespace,
) -> tuple[list[tuple[Path, str, str]], list[tuple[Path, str, str]]]:
    """(path, key, label) of the decodable new images and of the decodable validation images."""
    manifest = arrivals_manifest(args)
    new_entries, validation_entries = read_arrivals(manifest)
    if not args.data.is_dir():
        raise EvaluationError(f"data directory {args.data} does not exist")
    skipped: list[tuple[str, str]] = []
    new = data.decodable(new_entries, args.data, skipped)
    if not new:
        raise EvaluationError(f"no decodable new image in {args.data} of those {manifest} names")
    return new, data.decodable(validation_entries, args.data, skipped)


def evaluate_arrivals(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """The champion on a run's new uploads beside its validation images: arrivals.json, suspects.json
    and, with --hold-manifest, the run's manifest without the suspects."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    new, validation = arrival_images(args)
    champion = load_artifact(args.model, workdir)
    labels, unknown = scoring_labels(champion.labels, {label for _, _, label in (*new, *validation)})
    if unknown:
        log.warning("the model was not trained on %s: their images count as wrong", ", ".join(unknown))
    index = {label: i for i, label in enumerate(labels)}
    samples = [data.Sample(path, index[label], key) for path, key, label in (*new, *validation)]
    targets = np.array([s.label for s in samples], dtype=np.int64)
    options = {"batch_size": args.batch_size, "num_workers": args.num_workers, "device": device}
    logits = predict(build(champion, device), samples, image_size=champion.image_size, **options)
    count = len(new)
    scored_new = metrics(logits[:count], targets[:count], labels, champion.labels)
    scored_validation = (
        metrics(logits[count:], targets[count:], labels, champion.labels) if validation else None
    )
    found = new_suspects(logits, samples, count, champion.labels)
    known = len(champion.labels)
    document = label_check.report(
        found, targets[:count][targets[:count] < known], champion.labels, limit=contract.SUSPECTS_MAX
    )
    held = 0
    if args.hold_manifest is not None:
        held = hold(args.hold_manifest, args.held_output, {s.key for s in found})
    result = {
        "new": scored_new,
        "validation": scored_validation,
        "drift": None if scored_validation is None else scored_validation["top1"] - scored_new["top1"],
        "suspects": {key: document[key] for key in ("images_checked", "suspect_count", "per_label")},
        "held": held,
        "labels_the_model_lacks": unknown,
        "model": str(champion.source),
        "method": document["method"],
    }
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / contract.SUSPECTS_FILE).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    (args.output / contract.ARRIVALS_FILE).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


def new_suspects(
    logits: torch.Tensor, samples: Sequence[data.Sample], count: int, model_labels: list[str]
) -> list[label_check.Suspect]:
    """The suspects among the first `count` samples (the new uploads), all of them, most unlikely first:
    the label check runs over every sample whose label the model has, so each label has its threshold."""
    given, probabilities, keys = checkable(logits, samples, len(model_labels))
    new_keys = {s.key for s in samples[:count]}
    return [
        s for s in label_check.find_suspects(given, probabilities, model_labels, keys) if s.key in new_keys
    ]


def summary_line(result: dict[str, Any]) -> str:
    """The job's last line of output."""
    if "new" in result:
        validation = result["validation"]
        return (
            f"new top1: {result['new']['top1']:.6f} samples: {result['new']['samples']} validation top1: "
            f"{'-' if validation is None else format(validation['top1'], '.6f')} "
            f"suspects: {result['suspects']['suspect_count']} held: {result['held']}"
        )
    return f"top1: {result['top1']:.6f} top3: {result['top3']:.6f} samples: {result['samples']}"


def evaluate(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    check_arguments(args)
    if args.split == contract.SPLIT_ARRIVALS:
        return evaluate_arrivals(args, workdir)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    candidate = load_artifact(args.model, workdir)
    val_fraction = args.val_fraction if args.val_fraction is not None else candidate.val_fraction
    entries = collect(
        args.data,
        args.manifest,
        split=args.split,
        val_fraction=DEFAULT_VAL_FRACTION if val_fraction is None else val_fraction,
    )
    present = {label for _, _, label in entries}
    labels, unknown = scoring_labels(candidate.labels, present)
    if len(unknown) == len(present):
        raise EvaluationError(
            f"no image in {args.data} has a label the model knows ({', '.join(candidate.labels)})"
        )
    if unknown:
        log.warning("the model was not trained on %s: their images count as wrong", ", ".join(unknown))
    index = {label: i for i, label in enumerate(labels)}
    samples = [data.Sample(path, index[label], key) for path, key, label in entries]
    targets = np.array([s.label for s in samples])
    options = {"batch_size": args.batch_size, "num_workers": args.num_workers, "device": device}
    logits = predict(build(candidate, device), samples, image_size=candidate.image_size, **options)
    result = metrics(logits, targets, labels, candidate.labels)
    result["baseline"] = None
    if args.baseline is not None:
        baseline = load_artifact(args.baseline, workdir)
        base_logits = predict(build(baseline, device), samples, image_size=baseline.image_size, **options)
        result["baseline"] = metrics(base_logits, targets, labels, baseline.labels)
    result.update(
        split=args.split,
        model=str(candidate.source),
        labels_the_model_lacks=unknown,
        checkpoint_step=candidate.checkpoint_step,
    )
    result[contract.TRAINING_SKIPPED_KEY] = candidate.training_skipped
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / contract.EVALUATION_FILE).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if args.suspects:
        (args.output / contract.SUSPECTS_FILE).write_text(
            json.dumps(suspects(logits, samples, candidate.labels, len(candidate.labels)), indent=2) + "\n",
            encoding="utf-8",
        )
    if "confusion_matrix" in result:  # a chart of thousands of labels would show nothing
        plot_confusion(result["confusion_matrix"], labels, args.output / contract.CONFUSION_MATRIX_FILE)
    return result


def run(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    paths = contract.resolve_paths()

    def body() -> int:
        args = get_args_parser(paths.base).parse_args(argv)
        with tempfile.TemporaryDirectory() as workdir:
            result = evaluate(args, Path(workdir))
        print(summary_line(result), flush=True)
        return 0

    return contract.run_reporting_failure(paths, body, invalid="invalid evaluation arguments", argv=argv)


if __name__ == "__main__":
    sys.exit(run())
