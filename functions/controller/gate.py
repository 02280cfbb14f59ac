"""The quality gate: the challenger must be clearly better than guessing its validation split's most common
label (or reach MinAccuracy, when the stack sets one) and beat the champion by MinImprovement, and no
Debugger rule that BlockingRules names may have found issues; the other rules' findings, and verdicts that
cannot block (too few data points, suspected issues), are warnings the notification and the report carry.
Every decision carries its reason."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from controller import clients, names, runs
from controller.config import Config, get_config
from controller.errors import RuleEvaluationsInProgressError
from controller.observability import logger, tracer
from controller.s3io import read_json
from retrain_contract import container
from retrain_contract import rules as rule_names

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sagemaker import SageMakerClient

ISSUES_FOUND = rule_names.ISSUES
RULE_NO_VERDICT = rule_names.NO_VERDICT
MANAGED_RULE_DONE = (rule_names.NO_ISSUES, ISSUES_FOUND, *RULE_NO_VERDICT)


# Without a MinAccuracy, a model must be clearly better than guessing the validation split's most common
# label: a one-sided binomial test of its top-1 hits at this level.
GUESS_SIGNIFICANCE = 0.05


@dataclass(frozen=True)
class Thresholds:
    min_accuracy: float | None  # an absolute floor (MinAccuracy); None: better than guessing, by the test
    min_improvement: float
    blocking_rules: tuple[str, ...]  # the rules whose findings reject a model (BlockingRules)


@dataclass(frozen=True)
class Split:
    """The validation split a challenger was scored on: its images and its most common label's count."""

    samples: int
    majority: int

    @property
    def guess(self) -> float:
        """The top-1 accuracy of always naming the most common label."""
        return self.majority / self.samples if self.samples else 0.0


def split_of(report: dict[str, Any]) -> Split | None:
    """The split evaluation.json scored (its `samples` and per-label `support`); None when it says neither."""
    supports = [int(v.get("support", 0)) for v in (report.get("per_class") or {}).values()]
    samples = int(report.get("samples") or sum(supports))
    return Split(samples, max(supports)) if samples and supports else None


def binomial_tail(hits: int, n: int, p: float) -> float:
    """P(X >= hits) for X ~ Binomial(n, p), summed from `hits` up in log space until the terms stop
    mattering (they shrink geometrically past the mean, so a split of 10^6 images costs a few terms)."""
    if hits <= 0 or p >= 1.0:
        return 1.0
    if hits > n or p <= 0.0:
        return 0.0
    log_term = (
        math.lgamma(n + 1)
        - math.lgamma(hits + 1)
        - math.lgamma(n - hits + 1)
        + hits * math.log(p)
        + (n - hits) * math.log1p(-p)
    )
    term = total = math.exp(log_term)
    odds = p / (1.0 - p)
    for k in range(hits, n):
        term *= (n - k) / (k + 1) * odds
        total += term
        if k + 1 > n * p and term <= total * 1e-17:
            break
    return min(1.0, total)


def guess_p_value(top1: float, split: Split) -> float:
    """How likely guessing the most common label scores `top1` or more on `split` (one-sided binomial)."""
    return binomial_tail(round(top1 * split.samples), split.samples, split.guess)


def with_actions(
    rule_results: list[runs.RuleResult], blocking_rules: tuple[str, ...], *, managed: bool = False
) -> list[runs.RuleResult]:
    """Each result with what the gate does with it, block or warn (rule_names.action), and whether
    BlockingRules names its rule."""
    return [
        {
            **r,
            "blocking": r["rule"] in blocking_rules,
            "action": rule_names.action(
                r["rule"], blocking_rules, status=str(r.get("status", "")), managed=managed
            ),
        }
        for r in rule_results
    ]


def _said(results: list[runs.RuleResult]) -> str:
    return ", ".join(f"{r['rule']} ({r.get('status')})" for r in results)


def _floor(challenger: float, thresholds: Thresholds, split: Split | None) -> tuple[str, str]:
    """(why the challenger is below the floor, or "", what the accepted reason says of the floor)."""
    if thresholds.min_accuracy is not None:
        if challenger < thresholds.min_accuracy:
            return f"top-1 accuracy {challenger:.4f} is below MinAccuracy {thresholds.min_accuracy:.4f}", ""
        return "", ""
    if split is None:
        return "", "; no validation split to compare with guessing"
    p_value = guess_p_value(challenger, split)
    guessing = f"guessing the most common label scores {split.guess:.4f} of {split.samples} images"
    if p_value >= GUESS_SIGNIFICANCE:
        return (
            f"top-1 accuracy {challenger:.4f} is not clearly better than guessing: {guessing}, and scores "
            f"{challenger:.4f} or more by luck with probability p = {p_value:.3g} (a one-sided binomial test "
            f"needs p < {GUESS_SIGNIFICANCE:g}); more images per label or more training help, and "
            "MinAccuracy set to a number replaces this test by that floor",
            "",
        )
    return "", f"; {guessing} (p = {p_value:.2g})"


def decide(
    challenger: float,
    champion: float | None,
    rule_results: list[runs.RuleResult],
    thresholds: Thresholds,
    split: Split | None = None,
    *,
    managed: bool = False,
) -> runs.Gate:
    """Pure: accept or reject, with the reason a person reads in the notification."""
    acted = with_actions(rule_results, thresholds.blocking_rules, managed=managed)
    blocks = [r for r in acted if r["action"] == rule_names.BLOCK]
    blocked = [r["rule"] for r in blocks if r.get("status") == ISSUES_FOUND]
    if blocked:
        return {
            "decision": "rejected",
            "reason": f"rule(s) {', '.join(blocked)} found issues in training, and "
            f"{rule_names.BLOCKING_RULES_PARAMETER} names them",
        }
    # A blocking rule whose check failed (Error, Stopped) counts as a finding: a model the checks could not
    # clear is not accepted silently. A rule that judged and could not tell (WARN_ONLY) only warns.
    blocked_unchecked = [r for r in blocks if r.get("status") in RULE_NO_VERDICT]
    if blocked_unchecked:
        return {
            "decision": "rejected",
            "reason": f"rule(s) {_said(blocked_unchecked)} could not be evaluated, and "
            f"{rule_names.BLOCKING_RULES_PARAMETER} names them",
        }
    below, floor_note = _floor(challenger, thresholds, split)
    if below:
        return {"decision": "rejected", "reason": below}
    if champion is not None and challenger < champion + thresholds.min_improvement:
        return {
            "decision": "rejected",
            "reason": f"top-1 accuracy {challenger:.4f} does not beat the champion's {champion:.4f} "
            f"by MinImprovement {thresholds.min_improvement:.4f}",
        }
    versus = f"champion {champion:.4f}" if champion is not None else "no champion yet"
    note = floor_note
    flagged = [r["rule"] for r in acted if r.get("status") == ISSUES_FOUND]
    if flagged:
        note += f"; rule(s) {', '.join(flagged)} found issues (warnings, not blocking)"
    suspected = [r["rule"] for r in acted if r.get("status") == rule_names.SUSPECTED]
    if suspected:
        note += f"; rule(s) {', '.join(suspected)} suspected issues they cannot tell from a good run"
        note += " (warnings)"
    short = [r["rule"] for r in acted if r.get("status") == rule_names.INSUFFICIENT_DATA and r["blocking"]]
    if short:
        note += f"; blocking rule(s) {', '.join(short)} had too few data points to judge (not blocking)"
    unchecked = [r for r in acted if r.get("status") in RULE_NO_VERDICT]
    if unchecked:
        note += f"; rule(s) {_said(unchecked)} could not be evaluated (not blocking)"
    return {"decision": "accepted", "reason": f"top-1 accuracy {challenger:.4f} ({versus}){note}"}


MAX_UNREADABLE_RECORDED = 100  # the run record's share; the model's config.json lists up to 1000


def _read_evaluation(prefix: str, job: str, *, s3: S3Client) -> tuple[runs.Evaluation, dict[str, Any]]:
    uri = prefix.rstrip("/") + "/" + container.EVALUATION_FILE
    report = read_json(uri, s3=s3, what=f"{container.EVALUATION_FILE} of {job}")
    evaluation: runs.Evaluation = {
        "top1": float(report["top1"]),
        "top3": float(report.get("top3", report["top1"])),
        "job": job,
        "checkpoint_step": report.get("checkpoint_step"),
        "report_uri": uri,
    }
    return evaluation, report


def _evaluation(prefix: str, job: str, *, s3: S3Client) -> runs.Evaluation:
    return _read_evaluation(prefix, job, s3=s3)[0]


def unreadable_images(report: dict[str, Any], dataset: str) -> list[dict[str, str]]:
    """The files the challenger's training could not decode (evaluation.json's `training_skipped`, paths
    relative to the data set), as object keys with the decoder's reason."""
    prefix = names.dataset_prefix(dataset)
    return [
        {"key": prefix + str(item.get("path", "")).lstrip("/"), "reason": str(item.get("reason", ""))}
        for item in (report.get(container.TRAINING_SKIPPED_KEY) or [])[:MAX_UNREADABLE_RECORDED]
    ]


def managed_rule_results(training_job: str, *, sagemaker: SageMakerClient) -> list[runs.RuleResult]:
    """Managed Debugger's verdicts on the final training job, tensor and profiler rules alike. Rule
    evaluations go on after the job completes: while one is not done this raises
    RuleEvaluationsInProgressError, which the state machine retries."""
    description = sagemaker.describe_training_job(TrainingJobName=training_job)
    statuses = [
        *description.get("DebugRuleEvaluationStatuses", []),
        *description.get("ProfilerRuleEvaluationStatuses", []),
    ]
    pending = [
        str(s.get("RuleConfigurationName", "?"))
        for s in statuses
        if s.get("RuleEvaluationStatus") not in MANAGED_RULE_DONE
    ]
    if pending:
        raise RuleEvaluationsInProgressError(
            f"Debugger rule(s) {', '.join(pending)} of training job {training_job} are still being "
            "evaluated; the gate waits for every rule's verdict"
        )
    return [
        {
            "rule": str(s.get("RuleConfigurationName", "?")),
            "status": str(s.get("RuleEvaluationStatus", "?")),
            "detail": str(s.get("StatusDetails", "")),
        }
        for s in statuses
    ]


def rule_results(
    run: dict[str, Any], model: dict[str, Any], *, s3: S3Client, sagemaker: SageMakerClient | None
) -> list[runs.RuleResult]:
    mode = run["debugger_mode"]  # the stack's DebuggerMode, as Prepare wrote it into the run
    if mode == "open":
        uri = str(run["rules_s3_uri"]).rstrip("/") + "/" + container.RULE_RESULTS_FILE
        return list(read_json(uri, s3=s3, what=f"{container.RULE_RESULTS_FILE} of {run['jobs']['rules']}"))
    if mode == "managed" and model.get("final") and sagemaker is not None:
        return managed_rule_results(str(model["training_job"]), sagemaker=sagemaker)
    return []


def gate(
    event: dict[str, Any],
    *,
    config: Config,
    dynamodb: DynamoDBClient,
    s3: S3Client,
    sagemaker: SageMakerClient | None = None,
) -> dict[str, Any]:
    run, model = event["run"], event["model"]
    challenger, report = _read_evaluation(run["challenger_s3_uri"], run["jobs"]["challenger"], s3=s3)
    challenger["model_data"] = str(model["model_data"])
    champion = (
        _evaluation(run["champion_s3_uri"], run["jobs"]["champion"], s3=s3)
        if run.get("has_champion")
        else None
    )
    thresholds = Thresholds(config.min_accuracy, config.min_improvement, config.blocking_rules)
    managed = run["debugger_mode"] == "managed"
    found = rule_results(run, model, s3=s3, sagemaker=sagemaker)
    rules = with_actions(found, thresholds.blocking_rules, managed=managed)
    decision = decide(
        challenger["top1"],
        champion["top1"] if champion else None,
        found,
        thresholds,
        split_of(report),
        managed=managed,
    )
    fields: dict[str, Any] = {
        "challenger": challenger,
        "rule_results": rules,
        "rules_blocked": decision["decision"] == "rejected"
        and any(r.get("status") == ISSUES_FOUND and r.get("action") == rule_names.BLOCK for r in rules),
        "gate": decision,
        "model_data": str(model["model_data"]),
        "unreadable_images": unreadable_images(report, run["dataset"]),
    }
    if champion is not None:
        fields["champion"] = champion
    if model.get("final"):
        fields["final_training_job"] = str(model["training_job"])
    runs.update_run(run["dataset"], run["run_id"], fields, table_name=config.runs_table, client=dynamodb)
    logger.info("gate decided", extra={"run_id": run["run_id"], **decision})
    return {**decision, "top1": challenger["top1"], "evaluation_uri": challenger["report_uri"]}


@tracer.capture_lambda_handler
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return gate(
        event,
        config=get_config(),
        dynamodb=clients.dynamodb(),
        s3=clients.s3(),
        sagemaker=clients.sagemaker(),
    )
