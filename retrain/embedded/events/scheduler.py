"""Scheduled EventBridge rules, which moto stores but never fires.

:class:`Scheduler` fires the rules with a ScheduleExpression (``rate(...)`` and ``cron(...)``) at their
Lambda targets (SQS targets through ``send``); ``time_scale`` shrinks rate periods so a demo does not
wait minutes.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from retrain.embedded.account import ACCOUNT_ID, REGION

LOG = logging.getLogger(__name__)
Invoker = Callable[[str, dict[str, Any]], Any]

_RATE: Final = re.compile(r"^rate\((\d+)\s+(minute|minutes|hour|hours|day|days)\)$")
_CRON: Final = re.compile(r"^cron\((.+)\)$")
_UNIT_SECONDS: Final = {"minute": 60, "hour": 3600, "day": 86400}


class ScheduleError(ValueError):
    """A ScheduleExpression this runtime cannot run."""


def schedule_period_seconds(expression: str) -> float | None:
    """The period of a ``rate(...)`` expression; None for ``cron(...)`` (see :func:`cron_matches`)."""
    rate = _RATE.match(expression.strip())
    if rate:
        value, unit = int(rate.group(1)), rate.group(2).rstrip("s")
        if value < 1:
            raise ScheduleError(f"{expression!r}: the rate must be at least 1")
        return float(value * _UNIT_SECONDS[unit])
    if _CRON.match(expression.strip()):
        cron_fields(expression)
        return None
    raise ScheduleError(f"{expression!r} is neither rate(N unit) nor cron(6 fields)")


def cron_fields(expression: str) -> list[str]:
    match = _CRON.match(expression.strip())
    fields = match.group(1).split() if match else []
    if len(fields) != 6:
        raise ScheduleError(
            f"{expression!r}: cron needs 6 fields (minutes hours day-of-month month day-of-week year)"
        )
    for value in fields[2:]:
        if value not in ("*", "?"):
            raise ScheduleError(
                f"{expression!r}: the embedded scheduler runs cron on minutes and hours only; "
                "use * or ? in the other fields"
            )
    return fields


def _field_matches(spec: str, value: int) -> bool:
    for part in spec.split(","):
        base, _, step = part.partition("/")
        start, _, end = base.partition("-")
        low = 0 if start in ("*", "") else int(start)
        high = (59 if base == "*" else low) if not end else int(end)
        if step and not end and base != "*":
            high = 59
        if low <= value <= high and (value - low) % int(step or 1) == 0:
            return True
    return False


def cron_matches(expression: str, when: datetime.datetime) -> bool:
    """Whether a minutes/hours cron expression fires in the UTC minute ``when``."""
    minutes, hours, *_ = cron_fields(expression)
    return _field_matches(minutes, when.minute) and _field_matches(hours, when.hour)


@dataclass(frozen=True)
class ScheduledRule:
    name: str
    arn: str
    expression: str
    targets: tuple[dict[str, Any], ...]


def scheduled_event(rule: ScheduledRule, account: str, region: str) -> dict[str, Any]:
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": account,
        "time": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [rule.arn],
        "detail": {},
    }


class Scheduler:
    """Fires scheduled EventBridge rules at their Lambda targets (and SQS targets through ``send``)."""

    def __init__(
        self,
        rules: list[ScheduledRule],
        *,
        invoke: Invoker,
        sqs_client: Any = None,
        account: str = ACCOUNT_ID,
        region: str = REGION,
        time_scale: float = 1.0,
    ) -> None:
        for rule in rules:
            schedule_period_seconds(rule.expression)
        self.rules = rules
        self._invoke, self._sqs = invoke, sqs_client
        self._account, self._region, self._scale = account, region, time_scale
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="scheduler")
        self._running: set[str] = set()
        self._running_lock = threading.Lock()

    def start(self) -> None:
        if self.rules:
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def fire(self, rule: ScheduledRule) -> None:
        event = scheduled_event(rule, self._account, self._region)
        for target in rule.targets:
            payload = json.loads(target["Input"]) if target.get("Input") else event
            arn = str(target["Arn"])
            try:
                if ":lambda:" in arn:
                    self._invoke(arn, payload)
                elif ":sqs:" in arn and self._sqs is not None:
                    name = arn.rsplit(":", 1)[-1]
                    url = self._sqs.get_queue_url(QueueName=name)["QueueUrl"]
                    self._sqs.send_message(QueueUrl=url, MessageBody=json.dumps(payload))
                else:
                    LOG.warning(
                        "rule %s: target %s is not a Lambda function or SQS queue; skipped", rule.name, arn
                    )
            except Exception:
                LOG.exception("scheduled rule %s -> %s", rule.name, arn)

    def _fire_async(self, rule: ScheduledRule) -> None:
        """EventBridge invokes targets asynchronously: one rule's slow target never delays another rule.

        Unlike EventBridge, a rule whose previous firing still runs is skipped, so a scaled-down rate on a
        busy machine does not pile up invocations."""
        with self._running_lock:
            if rule.name in self._running:
                LOG.info("rule %s: previous firing still running; this one skipped", rule.name)
                return
            self._running.add(rule.name)

        def run() -> None:
            try:
                self.fire(rule)
            finally:
                with self._running_lock:
                    self._running.discard(rule.name)

        threading.Thread(target=run, daemon=True, name=f"rule-{rule.name}").start()

    def _loop(self) -> None:
        next_at: dict[str, float] = {}
        now = time.monotonic()
        for rule in self.rules:
            period = schedule_period_seconds(rule.expression)
            if period is not None:
                next_at[rule.name] = now + period * self._scale
        last_minute: datetime.datetime | None = None
        while not self._stop.wait(0.2):
            now = time.monotonic()
            minute = datetime.datetime.now(datetime.UTC).replace(second=0, microsecond=0)
            for rule in self.rules:
                period = schedule_period_seconds(rule.expression)
                if period is not None and now >= next_at[rule.name]:
                    next_at[rule.name] = now + period * self._scale
                    self._fire_async(rule)
                elif period is None and minute != last_minute and cron_matches(rule.expression, minute):
                    self._fire_async(rule)
            last_minute = minute
