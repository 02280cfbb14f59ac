"""What a run's notification says besides the decision: its data (refused uploads, labels set aside,
unreadable images: counts only, with where the details are) and each rule's finding (what it saw, what
the gate did with it, what to do)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller import names
from retrain_contract import rules


def lineage(started_from: Mapping[str, Any] | None) -> str:
    """What a run started from, in one phrase: scratch, ImageNet, pretrained weights, or the champion's
    package."""
    if not started_from:
        return "unknown (a run from before lineage was recorded)"
    kind = str(started_from.get("kind", ""))
    if kind == "champion":
        where = started_from.get("model_package_arn") or started_from.get("uri")
        return f"the champion {where}"
    if kind == "pretrained":
        return f"pretrained weights {started_from.get('uri')}"
    if kind == "imagenet":
        return "ImageNet weights (the training image's)"
    return f"random weights ({started_from.get('reason', 'scratch')})"


def start_line(record: Mapping[str, Any] | None) -> list[str]:
    """The notification's line on what the run started from."""
    if not record or not record.get("started_from"):
        return []
    return [f"Started from: {lineage(record['started_from'])}."]


def data_lines(record: Mapping[str, Any] | None, *, bucket: str) -> list[str]:
    """The notification's lines on the data of the run `record` (none when all was well)."""
    if not record:
        return []
    lines: list[str] = []
    rejected = {k: int(v) for k, v in (record.get("rejected_uploads") or {}).items() if int(v)}
    if rejected:
        parts = ", ".join(f"{count} {problem}" for problem, count in sorted(rejected.items()))
        lines.append(
            f"Uploads refused and left in the bucket: {sum(rejected.values())} ({parts}); "
            "each with its reason in `retrain status` and the report."
        )
    excluded = record.get("excluded_labels") or {}
    if excluded:
        said = "; ".join(f"{label}: {why}" for label, why in sorted(excluded.items()))
        total = int(record.get("excluded_label_count") or len(excluded))
        more = (
            f" and {total - len(excluded)} more (all in {record.get('class_counts_uri')})"
            if total > len(excluded)
            else ""
        )
        lines.append(f"Labels set aside from this run ({total}): {said}{more}.")
    unreadable = record.get("unreadable_images") or []
    if unreadable:
        lines.append(f"Images training could not decode: {len(unreadable)} (the report lists them).")
    policy = record.get("class_balance") or {}
    if record.get("class_counts_uri") and policy.get("mode", "none") != "none":
        lines.append(
            f"Classes balanced ({policy['mode']}) over {record.get('label_count')} labels: training images "
            f"and lines per class in {record['class_counts_uri']}."
        )
    if lines:
        report = names.report_uri(bucket, str(record["dataset"]), str(record["run_id"]))
        lines.append(f"Report: `retrain report {record['run_id']}` (published to {report}).")
    return lines


def rule_lines(record: Mapping[str, Any] | None) -> list[str]:
    """A line for each rule that found or suspected issues, or reached no verdict (a blocking rule's too
    few data points too): whether it blocked the model or is a warning, what it saw, what to do."""
    lines = []
    for result in (record or {}).get("rule_results") or []:
        status = result.get("status")
        blocks = result.get("action") == rules.BLOCK
        if status == rules.ISSUES:
            said = "found issues"
        elif status == rules.SUSPECTED:
            said = "suspected issues it cannot tell from a good run"
        elif status in rules.NO_VERDICT:
            said = f"reached no verdict ({status})"
        elif status == rules.INSUFFICIENT_DATA and result.get("blocking"):
            said = "had too few data points to judge"
        else:
            continue
        effect = "blocked the model" if blocks else "a warning, not blocking"
        detail = str(result.get("detail") or "no detail").rstrip(".")
        line = f"Rule {result['rule']} {said} ({effect}): {detail}."
        advice = rules.ADVICE.get(str(result["rule"]))
        if status in (rules.ISSUES, rules.SUSPECTED) and advice:
            line += f" What to do: {advice}."
        lines.append(line)
    return lines


def arrival_lines(record: Mapping[str, Any] | None) -> list[str]:
    """The champion on the run's new uploads, one line each: its top-1 there beside its validation
    top-1 (the drift), the suspected label errors and what became of them, and TrainWhen's decision."""
    arrivals = (record or {}).get("arrivals") or {}
    if not arrivals:
        return []
    if arrivals.get("top1") is None:
        problem = arrivals.get("problem") or arrivals.get("status")
        return [f"The champion on the new uploads: no figures ({problem})."]
    low, high = arrivals.get("top1_interval") or (0.0, 0.0)
    sample = f"a sample of {arrivals['checked']}" if arrivals.get("sampled") else f"{arrivals['checked']}"
    line = f"The champion on {sample} new uploads: top-1 {arrivals['top1']:.4f} (95% CI {low:.4f}-{high:.4f})"
    reference = arrivals.get("validation_top1")
    if reference is not None:
        line += f", {reference:.4f} on its validation split (drift {arrivals['drift']:+.4f})"
    lines = [line + "."]
    count = int(arrivals.get("suspect_count", 0))
    held = int(arrivals.get("held", 0))
    fate = f"{held} held out of this run's training" if held else "kept in training"
    lines.append(
        f"Suspected label errors among them: {count} ({float(arrivals.get('suspect_rate', 0.0)):.1%}), "
        f"{fate}; the list in {arrivals.get('suspects_uri')}."
        if count
        else "Suspected label errors among them: none."
    )
    if arrivals.get("train_when") == "drift":
        lines.append(f"TrainWhen=drift: {arrivals.get('reason')}.")
    return lines
