"""Processing-job entry point: freeze one run's manifest from the upload ledger.

Every accepted ledger row of the data set recorded before the run's cut goes into the manifest, in its
frozen split, balanced by the run's policy (retrain_contract.balance); a row is new when the data set's
watermark (the cut of its last completed run) is not above it. This is the run's only O(images) step, so
it runs here, on a SageMaker Processing instance, and not in a Lambda: the control plane reads back
`summary.json`, whose size does not grow with the images or the labels.

Outputs: `<manifest-dir>/manifest.jsonl` (the training jobs' manifest channel) and, in `<frozen-dir>`,
summary.json, labels.json and class_counts.json. The job waits until the cut is
RECORD_FENCE_SECONDS old before it reads, so every row recorded before the cut is readable.
"""

from __future__ import annotations

import argparse
import heapq
import json
import logging
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
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

    def manifest(self, only: str | None = None) -> Iterator[str]:
        """The manifest's lines (JSON Lines), or those of one split."""
        for path, label, split in self.plan.lines:
            if only is not None and split != only:
                continue
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


def freeze(
    rows: Iterable[dict[str, Any]], *, dataset: str, cut: str, trained_through: str, policy: balance.Policy
) -> Frozen:
    """The manifest of the accepted rows recorded before `cut`, and its summary."""
    prefix = f"data/{dataset}/"
    entries: list[tuple[str, str]] = []
    sizes: dict[str, int] = {}  # bytes of each accepted image, by its path in the data set
    new_by_label: Counter[str] = Counter()
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
        elif row.get(ledger.STATE) == ledger.STATE_REJECTED:
            rejected[str(row.get(ledger.PROBLEM, "layout"))] += 1
    planned = balance.plan(entries, policy)
    trained_labels = sorted(planned.counts)
    new_labels = sorted(label for label in new_by_label if label in planned.counts)
    excluded = sorted(planned.excluded.items())
    validation = sorted({path for path, _, split in planned.lines if split == container.SPLIT_VALIDATION})
    summary: dict[str, Any] = {
        "dataset": dataset,
        "cut": cut,
        "trained_through": trained_through,
        "rows_read": read,
        "recorded_after_cut": later,
        "accepted": len(entries),
        "size": sum(c.images for c in planned.counts.values()),
        "new": sum(n for label, n in new_by_label.items() if label in planned.counts),
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
    }
    return Frozen(planned, summary, validation)


def validation_manifest(frozen: Frozen, data_uri: str) -> Iterator[str]:
    """The validation split as a SageMaker ManifestFile (a JSON array: the prefix, then each key relative
    to it), so that an evaluation job downloads those images and no others."""
    yield json.dumps([{"prefix": data_uri}, *frozen.validation])


def write(frozen: Frozen, *, manifest_dir: Path, frozen_dir: Path, data_uri: str = "") -> None:
    manifest_dir.mkdir(parents=True, exist_ok=True)
    frozen_dir.mkdir(parents=True, exist_ok=True)
    if data_uri:
        with (frozen_dir / container.VALIDATION_MANIFEST_FILE).open("w", encoding="utf-8") as out:
            out.writelines(validation_manifest(frozen, data_uri))
    # the validation split's manifest lines: what an evaluation reads of the manifest
    lines = frozen_dir / container.VALIDATION_LINES_DIR
    lines.mkdir(exist_ok=True)
    with (lines / container.MANIFEST_FILE).open("w", encoding="utf-8") as out:
        out.writelines(frozen.manifest(only=container.SPLIT_VALIDATION))
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
