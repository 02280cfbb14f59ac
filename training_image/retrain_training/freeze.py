"""Processing-job entry point: freeze one run's manifest from the upload ledger.

Every accepted ledger row of the data set recorded before the run's cut goes into the manifest, in its
frozen split, balanced by the run's policy (retrain_contract.balance); a row is new when the data set's
watermark (the cut of its last completed run) is not above it. This is the run's only O(images) step, so
it runs here, on a SageMaker Processing instance, and not in a Lambda: the control plane reads back
`summary.json`, whose size does not grow with the images or the labels.

Outputs: `<manifest-dir>/manifest.jsonl` (the training jobs' manifest channel) and, in `<frozen-dir>`,
summary.json, labels.json and class_counts.json, the validation split's manifest and the arrivals': the
images the champion is evaluated on when the run starts (evaluate.py --split arrivals), its new uploads
of trained labels and the validation images that are not new, each a stratified sample of at most
ARRIVALS_NEW_MAX and ARRIVALS_VALIDATION_MAX images. The job waits until the cut is
RECORD_FENCE_SECONDS old before it reads, so every row recorded before the cut is readable.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import logging
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from retrain_contract import balance, container, ledger

log = logging.getLogger("freeze")
EXIT_FAILED = 1
COLUMNS = (ledger.SK, ledger.LABEL, ledger.STATE, ledger.RECORDED_AT, ledger.PROBLEM, ledger.SIZE)


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--table", required=True, help="the ledger table")
    parser.add_argument("--dataset", required=True)
    parser.add_argument(
        "--shards", type=int, default=1, help="the data set's ledger shards (retrain_contract.ledger)"
    )
    parser.add_argument("--cut", required=True, help="rows recorded before this time (ISO 8601) are in")
    parser.add_argument(
        "--trained-through", default="", help="the data set's watermark: rows from it on are new"
    )
    parser.add_argument("--policy", required=True, help="the run's balance policy, JSON (balance.Policy)")
    parser.add_argument(
        "--data-uri", default="", help="s3://<DataBucket>/data/<dataset>/: the validation manifest's prefix"
    )
    parser.add_argument("--region", default=None)
    parser.add_argument("--manifest-dir", type=Path, default=Path(container.FREEZE_MANIFEST_DIR))
    parser.add_argument("--frozen-dir", type=Path, default=Path(container.FREEZE_FROZEN_DIR))
    return parser


def parse_time(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def wait_for_fence(
    cut: str, *, clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep
) -> float:
    """Sleep until the cut is RECORD_FENCE_SECONDS old; the seconds slept."""
    remaining = parse_time(cut) + ledger.RECORD_FENCE_SECONDS - clock()
    if remaining > 0:
        log.info("waiting %.1f s for uploads recorded before the cut to become readable", remaining)
        sleep(remaining)
    return max(0.0, remaining)


def ledger_rows(parts: ledger.Partitions, *, table: str, client: Any) -> Iterator[dict[str, Any]]:
    """The data set's ledger rows in key order, its partitions' pages merged (consistent reads, only the
    columns the freeze uses)."""
    from boto3.dynamodb.types import TypeDeserializer

    deserializer = TypeDeserializer()
    names = {f"#c{i}": column for i, column in enumerate(COLUMNS)}

    def partition_rows(partition: str) -> Iterator[dict[str, Any]]:
        pages = client.get_paginator("query").paginate(
            TableName=table,
            KeyConditionExpression="#pk = :partition",
            ProjectionExpression=", ".join(names),
            ExpressionAttributeNames={"#pk": ledger.PK, **names},
            ExpressionAttributeValues={":partition": {"S": partition}},
            ConsistentRead=True,
        )
        for page in pages:
            for item in page["Items"]:
                yield {key: deserializer.deserialize(value) for key, value in item.items()}

    yield from heapq.merge(*map(partition_rows, parts.all()), key=lambda row: str(row[ledger.SK]))


@dataclass
class Frozen:
    """A run's frozen manifest and what the control plane is told of it."""

    plan: balance.Plan
    summary: dict[str, Any] = field(default_factory=dict)
    validation: list[str] = field(default_factory=list)  # paths of the validation split
    # what the champion is evaluated on: (path, label, split SPLIT_NEW or SPLIT_VALIDATION)
    arrivals: list[tuple[str, str, str]] = field(default_factory=list)

    def manifest(self, only: str | None = None) -> Iterator[str]:
        """The manifest's lines (JSON Lines), or those of one split."""
        return manifest_lines(line for line in self.plan.lines if only is None or line[2] == only)


def manifest_lines(lines: Iterable[tuple[str, str, str]]) -> Iterator[str]:
    """(path, label, split) as manifest lines (JSON Lines)."""
    for path, label, split in lines:
        yield (
            json.dumps(
                {
                    container.MANIFEST_PATH_KEY: path,
                    container.MANIFEST_LABEL_KEY: label,
                    container.MANIFEST_SPLIT_KEY: split,
                }
            )
            + "\n"
        )


def _stable_rank(path: str) -> bytes:
    """A path's place in a sample: a hash of the path alone, the same in every process (not hash())."""
    return hashlib.blake2b(path.encode("utf-8"), digest_size=16).digest()


def quotas(counts: Mapping[str, int], bound: int) -> dict[str, int]:
    """How many of each label's `counts` a sample of at most `bound` takes: all when they fit, else each
    label's share of `bound` (largest remainders first), at least one per label where `bound` allows."""
    total = sum(counts.values())
    if total <= bound:
        return dict(counts)
    share = {label: divmod(bound * n, total) for label, n in counts.items()}
    taken = {label: whole for label, (whole, _) in share.items()}
    # the images the floors leave over (fewer than the labels with a remainder): to the labels still
    # without one, then by largest remainder
    order = sorted(counts, key=lambda label: (taken[label] > 0 or not counts[label], -share[label][1], label))
    for label in order[: bound - sum(taken.values())]:
        taken[label] += 1
    for label in sorted(label for label in counts if taken[label] == 0 and counts[label] > 0):
        donor = max(sorted(taken), key=lambda other: taken[other])
        if taken[donor] <= 1:
            break  # more labels than the bound: not every label can have one
        taken[donor] -= 1
        taken[label] = 1
    return taken


def stratified_sample(by_label: Mapping[str, Iterable[str]], bound: int) -> list[tuple[str, str]]:
    """(path, label) of at most `bound` of the distinct paths, each label's share by `quotas`, chosen by
    a stable hash of the path: the same paths give the same sample. Sorted by path."""
    distinct = {label: sorted(set(paths), key=_stable_rank) for label, paths in by_label.items()}
    taken = quotas({label: len(paths) for label, paths in distinct.items()}, bound)
    return sorted((path, label) for label, paths in distinct.items() for path in paths[: taken[label]])


def arrivals(planned: balance.Plan, new_paths: Mapping[str, Iterable[str]]) -> list[tuple[str, str, str]]:
    """The champion's images: a sample of the new uploads of the labels the run trains, then one of the
    validation split's images that are not new."""
    new = {label: set(paths) for label, paths in new_paths.items() if label in planned.counts}
    is_new = set().union(*new.values())
    validation: dict[str, list[str]] = {}
    for path, label, split in planned.lines:
        if split == container.SPLIT_VALIDATION and path not in is_new:
            validation.setdefault(label, []).append(path)
    return [
        *(
            (path, label, container.SPLIT_NEW)
            for path, label in stratified_sample(new, container.ARRIVALS_NEW_MAX)
        ),
        *(
            (path, label, container.SPLIT_VALIDATION)
            for path, label in stratified_sample(validation, container.ARRIVALS_VALIDATION_MAX)
        ),
    ]


def freeze(
    rows: Iterable[dict[str, Any]], *, dataset: str, cut: str, trained_through: str, policy: balance.Policy
) -> Frozen:
    """The manifest of the accepted rows recorded before `cut`, and its summary."""
    prefix = f"data/{dataset}/"
    entries: list[tuple[str, str]] = []
    sizes: dict[str, int] = {}  # bytes of each accepted image, by its path in the data set
    new_by_label: Counter[str] = Counter()
    new_paths: dict[str, list[str]] = {}  # the new rows' paths, by label
    rejected: Counter[str] = Counter()
    read = later = 0
    for row in rows:
        read += 1
        if not ledger.is_upload(row):
            continue
        if str(row.get(ledger.RECORDED_AT, "")) >= cut:
            later += 1  # recorded after the run started: the next run's
            continue
        if ledger.is_accepted(row):
            label = str(row[ledger.LABEL])
            path = str(row[ledger.SK])[len(prefix) :]
            entries.append((path, label))
            sizes[path] = int(row.get(ledger.SIZE, 0))
            if ledger.is_new(row, trained_through):
                new_by_label[label] += 1
                new_paths.setdefault(label, []).append(path)
        elif row.get(ledger.STATE) == ledger.STATE_REJECTED:
            rejected[str(row.get(ledger.PROBLEM, "layout"))] += 1
    planned = balance.plan(entries, policy)
    trained_labels = sorted(planned.counts)
    new_labels = sorted(label for label in new_by_label if label in planned.counts)
    excluded = sorted(planned.excluded.items())
    validation = sorted({path for path, _, split in planned.lines if split == container.SPLIT_VALIDATION})
    chosen = arrivals(planned, new_paths)
    arrivals_new = sum(split == container.SPLIT_NEW for _, _, split in chosen)
    summary: dict[str, Any] = {
        "dataset": dataset,
        "cut": cut,
        "trained_through": trained_through,
        "rows_read": read,
        "recorded_after_cut": later,
        "accepted": len(entries),
        "size": sum(c.images for c in planned.counts.values()),
        "new": summary_new(new_by_label, planned),
        "manifest_lines": len(planned.lines),
        "label_count": len(trained_labels),
        "label_folders": len(trained_labels) + len(excluded),
        "labels_sample": trained_labels[: container.FROZEN_EXCLUDED_SAMPLE],
        "new_label_count": len(new_labels),
        # FSx imports at most 100 paths: more new labels import the data set's whole prefix
        "new_labels": new_labels if len(new_labels) <= container.FROZEN_NEW_LABELS_MAX else None,
        "excluded_label_count": len(excluded),
        "excluded_labels": dict(excluded[: container.FROZEN_EXCLUDED_SAMPLE]),
        "rejected_uploads": dict(sorted(rejected.items())),
        # what an evaluation job downloads: the validation split only (validation.manifest)
        "validation_images": len(validation),
        "validation_bytes": sum(sizes.get(path, 0) for path in validation),
        "data_bytes": sum(sizes.values()),
        # what the champion's evaluation on the new uploads downloads (arrivals.manifest)
        "arrivals_new": arrivals_new,
        "arrivals_validation": len(chosen) - arrivals_new,
        "arrivals_sampled": summary_new(new_by_label, planned) > container.ARRIVALS_NEW_MAX,
        "arrivals_bytes": sum(sizes.get(path, 0) for path, _, _ in chosen),
    }
    return Frozen(planned, summary, validation, chosen)


def summary_new(new_by_label: Mapping[str, int], planned: balance.Plan) -> int:
    """The new rows of the labels the run trains."""
    return sum(n for label, n in new_by_label.items() if label in planned.counts)


def validation_manifest(frozen: Frozen, data_uri: str) -> Iterator[str]:
    """The validation split as a SageMaker ManifestFile (a JSON array: the prefix, then each key relative
    to it), so that an evaluation job downloads those images and no others."""
    yield json.dumps([{"prefix": data_uri}, *frozen.validation])


def arrivals_manifest(frozen: Frozen, data_uri: str) -> Iterator[str]:
    """The arrivals' images as a SageMaker ManifestFile, as `validation_manifest`."""
    yield json.dumps([{"prefix": data_uri}, *(path for path, _, _ in frozen.arrivals)])


def write(frozen: Frozen, *, manifest_dir: Path, frozen_dir: Path, data_uri: str = "") -> None:
    manifest_dir.mkdir(parents=True, exist_ok=True)
    frozen_dir.mkdir(parents=True, exist_ok=True)
    if data_uri:
        with (frozen_dir / container.VALIDATION_MANIFEST_FILE).open("w", encoding="utf-8") as out:
            out.writelines(validation_manifest(frozen, data_uri))
        with (frozen_dir / container.ARRIVALS_MANIFEST_FILE).open("w", encoding="utf-8") as out:
            out.writelines(arrivals_manifest(frozen, data_uri))
    # the validation split's manifest lines: what an evaluation reads of the manifest
    lines = frozen_dir / container.VALIDATION_LINES_DIR
    lines.mkdir(exist_ok=True)
    with (lines / container.MANIFEST_FILE).open("w", encoding="utf-8") as out:
        out.writelines(frozen.manifest(only=container.SPLIT_VALIDATION))
    # the arrivals' lines (split new or validation): what the champion's evaluation reads (always
    # written; the control plane starts that job only when the run has new images)
    lines = frozen_dir / container.ARRIVALS_LINES_DIR
    lines.mkdir(exist_ok=True)
    with (lines / container.MANIFEST_FILE).open("w", encoding="utf-8") as out:
        out.writelines(manifest_lines(frozen.arrivals))
    with (manifest_dir / container.MANIFEST_FILE).open("w", encoding="utf-8") as out:
        out.writelines(frozen.manifest())
    (frozen_dir / container.FROZEN_LABELS_FILE).write_text(json.dumps(sorted(frozen.plan.counts)))
    (frozen_dir / container.FROZEN_CLASS_COUNTS_FILE).write_text(json.dumps(frozen.plan.record()))
    (frozen_dir / container.FROZEN_SUMMARY_FILE).write_text(json.dumps(frozen.summary, sort_keys=True))


def main(
    argv: Sequence[str] | None = None, *, client: Any = None, sleep: Callable[[float], None] = time.sleep
) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = get_args_parser().parse_args(argv)
    try:
        policy = balance.Policy(**json.loads(args.policy))
    except (TypeError, ValueError) as error:
        log.error("--policy %r is not a balance policy: %s", args.policy, error)
        return EXIT_FAILED
    wait_for_fence(args.cut, sleep=sleep)
    if client is None:
        import boto3

        client = boto3.client("dynamodb", region_name=args.region)
    started = time.monotonic()
    rows = ledger_rows(ledger.Partitions(args.dataset, args.shards), table=args.table, client=client)
    frozen = freeze(
        rows, dataset=args.dataset, cut=args.cut, trained_through=args.trained_through, policy=policy
    )
    write(frozen, manifest_dir=args.manifest_dir, frozen_dir=args.frozen_dir, data_uri=args.data_uri)
    summary = frozen.summary
    log.info(
        "froze %d images in %d labels (%d new) from %d ledger rows in %.1f s",
        summary["size"],
        summary["label_count"],
        summary["new"],
        summary["rows_read"],
        time.monotonic() - started,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
