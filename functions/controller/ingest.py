"""Ingest: record each uploaded object from the queue in the ledger, accepted or rejected with a reason.

An upload is accepted when its key has the layout (uploads.py), its bytes are an image of its extension's
format with sane dimensions and an intact end (content.py, two ranged reads), and the same bytes are not
already in the data set (a duplicate under the same label, a conflict under another). A deleted upload's
row becomes `removed`. SQS batches are processed with Powertools' AsyncBatchProcessor, RECORD_THREADS
records at once: a record fails (and is retried, then goes to the DLQ) only on an AWS error; a test event
or an unreadable body is logged and dropped, a bad upload is recorded as rejected. A throttle (DynamoDB's
partition or table throughput, S3's per-prefix rate) is a limit that clears by itself: the notice is tried
again with jittered exponential backoff while the function has time, then put back on the queue with a
delay, as a new message, so a first load at the quotas' edge never walks messages to the DLQ
(MAX_REQUEUES bounds it for a limit that does not clear). Nothing here deletes,
moves or rewrites an uploaded object. Messages that write the same ledger item (an object's row, a
content's claim) are recorded in their batch's order, so the first of two copies in a batch holds the
bytes as before; across batches, as SQS delivers them, every write is conditional (ledger.py).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from aws_lambda_powertools.utilities.batch import (
    AsyncBatchProcessor,
    EventType,
    async_process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from botocore.exceptions import ClientError

from controller import clients, content, datasets, dispatch, ledger, names, uploads
from controller.config import Config, get_config
from controller.observability import logger, metrics, tracer
from controller.s3events import ObjectCreated, UnreadableNoticeError, parse_body
from retrain_contract.ledger import Partitions

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient


# Records of one SQS batch handled at once, each in a thread: an upload's time on AWS is mostly waiting on
# its two ranged S3 reads and two DynamoDB writes, so one function records about this many uploads in the
# time of one (bench/ingest_scale.py). The clients' connection pools hold as many (clients.POOL).
RECORD_THREADS = clients.POOL_CONNECTIONS

# The error codes of a request refused by a rate that clears by itself: DynamoDB's partition and table
# throughput, S3's "503 Slow Down" while it partitions a prefix, any API's request rate.
THROTTLE_CODES: Final = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "RequestLimitExceeded",
        "SlowDown",
        "TooManyRequestsException",
    }
)
BACKOFF_BASE_SECONDS: Final = 0.1
BACKOFF_CAP_SECONDS: Final = 5.0
# Left of the function's time when backing off stops: the batch's other records (a ledger put ends within
# retrain_contract.ledger.RECORD_PUT_BOUND_SECONDS), the requeue and the after-batch dispatch check.
TIME_RESERVE_SECONDS: Final = 20.0
PATIENCE_WITHOUT_CONTEXT_SECONDS: Final = 30.0
# A notice put back waits a random 1-5 minutes (SQS's DelaySeconds; at most 900); after this many returns
# it fails as any error does (retried, then the DLQ and its alarm): a limit that has not cleared in hours
# is one to look at.
REQUEUE_DELAY_SECONDS: Final = (60, 300)
MAX_REQUEUES: Final = 24
REQUEUES_ATTRIBUTE: Final = "retrain-requeues"


def is_throttle(error: ClientError) -> bool:
    return error.response.get("Error", {}).get("Code", "") in THROTTLE_CODES


def backoff_seconds(attempt: int) -> float:
    """Full-jitter exponential backoff (AWS Architecture Blog, "Exponential Backoff And Jitter")."""
    return random.uniform(0, min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2**attempt))


def requeues_of(record: SQSRecord) -> int:
    attribute = record.message_attributes.get(REQUEUES_ATTRIBUTE)
    return int(attribute.string_value or 0) if attribute is not None else 0


@dataclass
class Tally:
    """What one batch did, for metrics and the after-ingest dispatch check."""

    accepted: Counter[str] = field(default_factory=Counter)  # data set -> new pending rows
    rejected: int = 0
    duplicates: int = 0
    ignored: int = 0
    removed: int = 0
    requeued: int = 0


def touched(record: SQSRecord) -> set[str]:
    """The ledger items a message's notices write: each object's row, and its bytes' claim."""
    try:
        notices = parse_body(record.body)
    except UnreadableNoticeError:
        return set()
    items = {f"key {n.key}" for n in notices}
    return items | {f"claim {names.content_claim_key(n.etag, n.size)}" for n in notices if n.etag}


class Ingestor:
    """Records the notices of one batch; `record_handler` is what AsyncBatchProcessor awaits per message,
    `record_message` what it runs in one of RECORD_THREADS threads."""

    def __init__(
        self,
        config: Config,
        dynamodb: DynamoDBClient,
        s3: S3Client | None = None,
        clock: Callable[[], datetime] | None = None,
        writer: DynamoDBClient | None = None,
        *,
        sqs: SQSClient | None = None,
        patience_seconds: float = PATIENCE_WITHOUT_CONTEXT_SECONDS,
    ) -> None:
        self.config = config
        self.sqs = sqs  # puts back a notice that throttles kept from being recorded
        self.deadline = time.monotonic() + patience_seconds  # no backoff begins after this
        self.clock = clock or (lambda: datetime.now(UTC))
        self.dynamodb = dynamodb
        self.writer = writer or dynamodb  # writes the ledger rows (clients.ledger_writer: bounded in time)
        self.s3 = s3
        self.tally = Tally()
        self.limits = content.Limits(config.min_image_side, config.max_image_pixels)
        self.partitions: dict[str, Partitions] = {}  # data set -> its ledger partitions (fixed once set)
        self.lock = threading.Lock()  # the tally and the partitions, from the record threads
        self.threads = ThreadPoolExecutor(max_workers=RECORD_THREADS, thread_name_prefix="record")
        self.last: dict[str, asyncio.Future[None]] = {}  # ledger item -> the last message touching it

    def count(self, what: str, dataset: str = "") -> None:
        with self.lock:
            if what == "accepted":
                self.tally.accepted[dataset] += 1
            else:
                setattr(self.tally, what, getattr(self.tally, what) + 1)

    def parts(self, dataset: str) -> Partitions:
        with self.lock:  # one read (and first write) per data set and batch, not one per thread
            if dataset not in self.partitions:
                self.partitions[dataset] = datasets.settle_partitions(
                    dataset, table_name=self.config.datasets_table, client=self.dynamodb
                )
            return self.partitions[dataset]

    async def record_handler(self, record: SQSRecord) -> None:
        """Record one message in a thread, after the batch's earlier messages that touch the same ledger
        items (its keys, its contents' claims): those keep their batch order, the rest run at once. The
        batch's handlers start in its order, so each registers before any later one looks."""
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        items = touched(record)
        earlier = {id(f): f for f in (self.last.get(item) for item in items) if f is not None}
        for item in items:
            self.last[item] = done
        try:
            for future in earlier.values():
                await future
            await loop.run_in_executor(self.threads, self.record_message, record)
        finally:
            done.set_result(None)

    def record_message(self, record: SQSRecord) -> None:
        try:
            notices = parse_body(record.body)
        except UnreadableNoticeError as error:
            self.count("ignored")
            logger.warning(
                "dropped an unreadable message", extra={"message_id": record.message_id, "error": str(error)}
            )
            return
        if not notices:
            self.count("ignored")
            logger.info(
                "ignored a message without object-created notices", extra={"message_id": record.message_id}
            )
            return
        try:
            for notice in notices:
                self.record_patiently(notice)
        except ClientError as error:
            if not is_throttle(error) or not self.requeue(record):
                raise
            logger.warning(
                "put a throttled notice back on the queue",
                extra={"message_id": record.message_id, "error": str(error)},
            )

    def record_patiently(self, notice: ObjectCreated) -> None:
        """Record one notice, again after a throttle (each try stamps its own recorded_at) while the
        function has time; the last throttle is raised."""
        attempt = 0
        while True:
            try:
                self.record_notice(notice)
                return
            except ClientError as error:
                pause = backoff_seconds(attempt)
                if not is_throttle(error) or time.monotonic() + pause > self.deadline:
                    raise
            time.sleep(pause)
            attempt += 1

    def requeue(self, record: SQSRecord) -> bool:
        """Send the message again as a new one (its receive count starts over), delayed; False when this
        function has no queue to send to or the message came back MAX_REQUEUES times already."""
        returns = requeues_of(record)
        if self.sqs is None or not self.config.ingest_queue_url or returns >= MAX_REQUEUES:
            return False
        self.sqs.send_message(
            QueueUrl=self.config.ingest_queue_url,
            MessageBody=record.body,
            DelaySeconds=random.randint(*REQUEUE_DELAY_SECONDS),
            MessageAttributes={REQUEUES_ATTRIBUTE: {"DataType": "Number", "StringValue": str(returns + 1)}},
        )
        self.count("requeued")
        return True

    def record_notice(self, notice: ObjectCreated) -> None:
        if names.is_fsx_report(notice.key):
            self.count("ignored")
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
            self.parts(verdict.dataset),
            table_name=self.config.ledger_table,
            client=self.writer,
            recorded_at=ledger.iso(self.clock()),  # just before the put: see retrain_contract.ledger
        )
        if not written:
            self.count("duplicates")
        elif verdict.accepted:
            self.count("accepted", verdict.dataset)
        else:
            self.count("rejected")
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
        parts = self.parts(verdict.dataset)
        holder = ledger.claim_content(
            parts, claim, notice.key, verdict.label, table_name=table, client=self.dynamodb
        )
        if holder is None:
            return verdict
        first = str(holder["first_key"])
        row = ledger.get_row(parts, first, table_name=table, client=self.dynamodb)
        stale = (
            row is None
            or row.get("state") in (names.STATE_REJECTED, names.STATE_REMOVED)
            or names.content_claim_key(str(row.get("etag", "")), int(row.get("size", 0))) != claim
        )
        if stale and ledger.take_over_claim(
            parts,
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
            self.count("ignored")
            return
        table, parts = self.config.ledger_table, self.parts(verdict.dataset)
        old = ledger.mark_removed(parts, notice.key, notice.sequencer, table_name=table, client=self.dynamodb)
        if old is None:
            self.count("duplicates")
            return
        self.count("removed")
        if old.get("etag"):
            claim = names.content_claim_key(str(old["etag"]), int(old.get("size", 0)))
            ledger.release_claim(parts, claim, notice.key, table_name=table, client=self.dynamodb)
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
    sqs: SQSClient | None = None,
    patience_seconds: float | None = None,
) -> dict[str, Any]:
    """Process one SQS batch; returns the partial-batch response ({"batchItemFailures": [...]}).
    `clock` stamps each row's recorded_at (tests give a fixed one); `patience_seconds`, how long throttled
    notices are tried again before they go back to the queue (by default, the function's time left less
    TIME_RESERVE_SECONDS)."""
    if patience_seconds is not None:
        patience = patience_seconds
    elif context is not None:
        patience = context.get_remaining_time_in_millis() / 1000 - TIME_RESERVE_SECONDS
    else:
        patience = PATIENCE_WITHOUT_CONTEXT_SECONDS
    ingestor = Ingestor(config, dynamodb, s3, clock, writer, sqs=sqs, patience_seconds=patience)
    processor = AsyncBatchProcessor(event_type=EventType.SQS)
    with ingestor.threads:
        response = async_process_partial_response(
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
    metrics.add_metric(name=names.METRIC_REQUEUED, unit="Count", value=tally.requeued)
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
        sqs=clients.sqs(),
    )
