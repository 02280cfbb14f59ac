"""Ingest: record each uploaded object from the queue in the ledger, accepted or rejected with a reason.

An upload is accepted when its key has the layout (uploads.py), its bytes are an image of its extension's
format with sane dimensions and an intact end (content.py, two ranged reads), and the same bytes are not
already in the data set (a duplicate under the same label, a conflict under another). A deleted upload's
row becomes `removed`. SQS batches are processed with Powertools' BatchProcessor: a record fails (and is
retried, then goes to the DLQ) only on an AWS error; a test event or an unreadable body is logged and
dropped, a bad upload is recorded as rejected. Nothing here deletes, moves or rewrites an uploaded object.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from controller import clients, content, datasets, dispatch, ledger, names, uploads
from controller.config import Config, get_config
from controller.observability import logger, metrics, tracer
from controller.s3events import ObjectCreated, UnreadableNoticeError, parse_body

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_stepfunctions import SFNClient


@dataclass
class Tally:
    """What one batch did, for metrics and the after-ingest dispatch check."""

    accepted: Counter[str] = field(default_factory=Counter)  # data set -> new pending rows
    rejected: int = 0
    duplicates: int = 0
    ignored: int = 0
    removed: int = 0


class Ingestor:
    """Records the notices of one batch; `record_handler` is what BatchProcessor calls per message."""

    def __init__(
        self,
        config: Config,
        dynamodb: DynamoDBClient,
        s3: S3Client | None = None,
        clock: Callable[[], datetime] | None = None,
        writer: DynamoDBClient | None = None,
    ) -> None:
        self.config = config
        self.clock = clock or (lambda: datetime.now(UTC))
        self.dynamodb = dynamodb
        self.writer = writer or dynamodb  # writes the ledger rows (clients.ledger_writer: bounded in time)
        self.s3 = s3
        self.tally = Tally()
        self.limits = content.Limits(config.min_image_side, config.max_image_pixels)

    def record_handler(self, record: SQSRecord) -> None:
        try:
            notices = parse_body(record.body)
        except UnreadableNoticeError as error:
            self.tally.ignored += 1
            logger.warning(
                "dropped an unreadable message", extra={"message_id": record.message_id, "error": str(error)}
            )
            return
        if not notices:
            self.tally.ignored += 1
            logger.info(
                "ignored a message without object-created notices", extra={"message_id": record.message_id}
            )
            return
        for notice in notices:
            self.record_notice(notice)

    def record_notice(self, notice: ObjectCreated) -> None:
        if names.is_fsx_report(notice.key):
            self.tally.ignored += 1
            logger.info("ignored an FSx import report", extra={"key": notice.key})
            return
        if notice.removed:
            self.record_removal(notice)
            return
        verdict = uploads.judge(notice.key, notice.size)
        if verdict.accepted and notice.bucket != self.config.data_bucket:
            verdict = uploads.Verdict(
                verdict.dataset,
                verdict.label,
                verdict.filename,
                f"the bucket {notice.bucket!r} is not the data bucket",
            )
        if verdict.accepted:
            verdict = self.inspect(notice, verdict)
        written = ledger.record(
            notice,
            verdict,
            table_name=self.config.ledger_table,
            client=self.writer,
            recorded_at=ledger.iso(self.clock()),  # just before the put: see retrain_contract.ledger
        )
        if not written:
            self.tally.duplicates += 1
        elif verdict.accepted:
            self.tally.accepted[verdict.dataset] += 1
        else:
            self.tally.rejected += 1
            logger.warning("rejected an upload", extra={"key": notice.key, "reason": verdict.reason})

    def inspect(self, notice: ObjectCreated, verdict: uploads.Verdict) -> uploads.Verdict:
        """A well-placed upload's bytes (content.py), then whether the same bytes are already in the data
        set: under the same label a duplicate, under another a conflict. Both are refused with the key
        that holds the bytes, so they are trained once and under one label."""
        if self.s3 is not None:
            problem = content.check_object(
                self.config.data_bucket,  # the notice's bucket: judge() refuses any other
                notice.key,
                version_id=notice.version_id,
                size=notice.size,
                limits=self.limits,
                s3=self.s3,
            )
            if problem:
                return replace(verdict, reason=problem, problem=names.PROBLEM_CONTENT)
        if not notice.etag:
            return verdict
        table = self.config.ledger_table
        claim = names.content_claim_key(notice.etag, notice.size)
        holder = ledger.claim_content(
            verdict.dataset, claim, notice.key, verdict.label, table_name=table, client=self.dynamodb
        )
        if holder is None:
            return verdict
        first = str(holder["first_key"])
        row = ledger.get_row(verdict.dataset, first, table_name=table, client=self.dynamodb)
        stale = (
            row is None
            or row.get("state") in (names.STATE_REJECTED, names.STATE_REMOVED)
            or names.content_claim_key(str(row.get("etag", "")), int(row.get("size", 0))) != claim
        )
        if stale and ledger.take_over_claim(
            verdict.dataset,
            claim,
            notice.key,
            verdict.label,
            previous=first,
            table_name=table,
            client=self.dynamodb,
        ):
            return verdict
        if holder.get("label") == verdict.label:
            return replace(
                verdict,
                reason=f"the same bytes are already uploaded as {first}; they are trained once "
                "(delete this copy)",
                problem=names.PROBLEM_DUPLICATE,
            )
        return replace(
            verdict,
            reason=f"the same bytes are already uploaded under label {holder.get('label')!r} as {first}: "
            "an image belongs to one label; delete the copy under the wrong label (then upload it again if "
            "needed)",
            problem=names.PROBLEM_CONFLICT,
        )

    def record_removal(self, notice: ObjectCreated) -> None:
        """A deleted upload stops being trained on, and gives up its bytes' claim."""
        verdict = uploads.judge(notice.key, 1)
        if verdict.dataset == uploads.REJECTED_DATASET:
            self.tally.ignored += 1
            return
        table = self.config.ledger_table
        old = ledger.mark_removed(
            verdict.dataset, notice.key, notice.sequencer, table_name=table, client=self.dynamodb
        )
        if old is None:
            self.tally.duplicates += 1
            return
        self.tally.removed += 1
        if old.get("etag"):
            claim = names.content_claim_key(str(old["etag"]), int(old.get("size", 0)))
            ledger.release_claim(verdict.dataset, claim, notice.key, table_name=table, client=self.dynamodb)
        logger.info("an upload was deleted", extra={"key": notice.key})


def ingest(  # noqa: PLR0913 - the handler's clients, and the clocks tests set
    event: dict[str, Any],
    *,
    config: Config,
    dynamodb: DynamoDBClient,
    sfn: SFNClient | None = None,
    s3: S3Client | None = None,
    now: datetime | None = None,
    context: LambdaContext | None = None,
    clock: Callable[[], datetime] | None = None,
    writer: DynamoDBClient | None = None,
) -> dict[str, Any]:
    """Process one SQS batch; returns the partial-batch response ({"batchItemFailures": [...]}).
    `clock` stamps each row's recorded_at (tests give a fixed one)."""
    ingestor = Ingestor(config, dynamodb, s3, clock, writer)
    processor = BatchProcessor(event_type=EventType.SQS)
    response = process_partial_response(
        event=event, record_handler=ingestor.record_handler, processor=processor, context=context
    )
    tally = ingestor.tally
    at = ledger.now_iso()
    for dataset, count in tally.accepted.items():
        datasets.touch(dataset, count, at, table_name=config.datasets_table, client=dynamodb)
    metrics.add_metric(name=names.METRIC_ACCEPTED, unit="Count", value=sum(tally.accepted.values()))
    metrics.add_metric(name=names.METRIC_REJECTED, unit="Count", value=tally.rejected)
    metrics.add_metric(name=names.METRIC_DUPLICATES, unit="Count", value=tally.duplicates)
    metrics.add_metric(name=names.METRIC_REMOVED, unit="Count", value=tally.removed)
    if sfn is not None and config.state_machine_arn:
        moment = now or datetime.now(UTC)
        for dataset in tally.accepted:
            dispatch.consider(
                dataset, now=moment, config=config, dynamodb=dynamodb, sfn=sfn, trigger="upload"
            )
    return dict(response)


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return ingest(
        event,
        config=get_config(),
        dynamodb=clients.dynamodb(),
        sfn=clients.sfn(),
        s3=clients.s3(),
        context=context,
        writer=clients.ledger_writer(),  # its row writes end within a bound (retrain_contract.ledger)
    )
