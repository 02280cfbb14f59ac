"""Ingest: record each uploaded object from the queue in the ledger, accepted or rejected with a reason.

SQS batches are processed with Powertools' BatchProcessor: a record fails (and is retried, then goes
to the DLQ) only on an AWS error; a test event or an unreadable body is logged and dropped, a bad key
is recorded as rejected. Nothing here deletes, moves or rewrites an uploaded object.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import boto3
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from controller import datasets, dispatch, ledger, names, uploads
from controller.config import Config, get_config
from controller.observability import logger, metrics, tracer
from controller.s3events import ObjectCreated, UnreadableNoticeError, parse_body

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_stepfunctions import SFNClient


@dataclass
class Tally:
    """What one batch did, for metrics and the after-ingest dispatch check."""

    accepted: Counter[str] = field(default_factory=Counter)  # data set -> new pending rows
    rejected: int = 0
    duplicates: int = 0
    ignored: int = 0


class Ingestor:
    """Records the notices of one batch; `record_handler` is what BatchProcessor calls per message."""

    def __init__(self, config: Config, dynamodb: DynamoDBClient) -> None:
        self.config = config
        self.dynamodb = dynamodb
        self.tally = Tally()

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
        verdict = uploads.judge(notice.key, notice.size)
        if verdict.accepted and notice.bucket != self.config.data_bucket:
            verdict = uploads.Verdict(
                verdict.dataset,
                verdict.label,
                verdict.filename,
                f"the bucket {notice.bucket!r} is not the data bucket",
            )
        written = ledger.record(
            notice,
            verdict,
            table_name=self.config.ledger_table,
            client=self.dynamodb,
            recorded_at=ledger.now_iso(),
        )
        if not written:
            self.tally.duplicates += 1
        elif verdict.accepted:
            self.tally.accepted[verdict.dataset] += 1
        else:
            self.tally.rejected += 1
            logger.warning("rejected an upload", extra={"key": notice.key, "reason": verdict.reason})


def ingest(
    event: dict[str, Any],
    *,
    config: Config,
    dynamodb: DynamoDBClient,
    sfn: SFNClient | None = None,
    now: datetime | None = None,
    context: LambdaContext | None = None,
) -> dict[str, Any]:
    """Process one SQS batch; returns the partial-batch response ({"batchItemFailures": [...]})."""
    ingestor = Ingestor(config, dynamodb)
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
        dynamodb=boto3.client("dynamodb"),
        sfn=boto3.client("stepfunctions"),
        context=context,
    )
