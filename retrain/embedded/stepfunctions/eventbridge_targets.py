"""EventBridge rules with Lambda targets (moto raises for them): the function invoked asynchronously with
the event or the target's Input / InputPath / InputTransformer, as EventBridge delivers it. With the
`duplicate-events` fault every matched event is delivered to every target a second time, late (what
EventBridge's at-least-once delivery and Lambda's retries of an asynchronous invocation do)."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from retrain.embedded.stepfunctions.lambda_invoke import run_invoker
from retrain.embedded.stepfunctions.services import ACTIVE


def target_input(target: Mapping[str, Any], event: dict[str, Any]) -> Any:
    """What EventBridge delivers to a target: the event, or the target's Input / InputPath / transformer."""
    if target.get("Input"):
        return json.loads(str(target["Input"]))
    if target.get("InputPath"):
        value: Any = event
        for part in str(target["InputPath"]).lstrip("$").strip(".").split("."):
            value = value.get(part) if part and isinstance(value, dict) else value
        return value
    if target.get("InputTransformer"):
        from moto.events import utils as events_utils

        parser: Any = events_utils.EventTemplateParser
        transformer = target["InputTransformer"]
        rendered = parser.parse(
            input_template=transformer.get("InputTemplate"),
            input_paths_map=transformer.get("InputPathsMap", {}),
            event=event,
        )
        return json.loads(rendered) if isinstance(rendered, str) else rendered
    return event


def patched_send_to_targets(original: Callable[..., None]) -> Callable[..., None]:
    """moto's Rule.send_to_targets knows SQS, logs and buses but raises for Lambda targets (PutEvents and
    S3 -> EventBridge both go through it). Lambda targets are invoked asynchronously, as EventBridge does."""

    def send_to_targets(rule: Any, original_event: Any, transform_input: bool = True) -> None:
        if not rule.event_pattern.get_pattern():
            # A rule without an event pattern is a schedule: EventBridge never hands it bus events
            # (moto's empty pattern matches every event). The embedded scheduler fires it.
            return
        deliver(rule, original_event, transform_input)
        delay = ACTIVE.redelivery() if ACTIVE.redelivery is not None else None
        if delay is not None and rule.event_pattern.matches_event(original_event):
            again = threading.Timer(
                delay, deliver, args=(rule, copy.deepcopy(original_event), transform_input)
            )
            again.daemon = True
            again.name = f"redelivery-{rule.name}"
            again.start()

    def deliver(rule: Any, original_event: Any, transform_input: bool) -> None:
        lambda_targets = [t for t in rule.targets if ":lambda:" in str(t.get("Arn", ""))]
        if lambda_targets and ACTIVE.lambda_invoker is not None:
            if rule.event_pattern.matches_event(original_event):
                for target in lambda_targets:
                    payload = target_input(target, original_event)
                    name = str(target["Arn"]).rsplit(":function:", 1)[-1]
                    threading.Thread(
                        target=run_invoker, args=(name, payload), daemon=True, name=f"rule-{rule.name}"
                    ).start()
            others = copy.copy(rule)
            others.targets = [t for t in rule.targets if t not in lambda_targets]
            original(others, original_event, transform_input)
            return
        original(rule, original_event, transform_input)

    return send_to_targets
