"""Managed Debugger for emulated training jobs: the hook config file, rule evaluations, uploads.

With DebugHookConfig SageMaker writes `/opt/ml/input/config/debughookconfig.json` (the hook follows
it) and uploads the hook's LocalPath to `<S3OutputPath>/<job>/debug-output/`; each
DebugRuleConfiguration / ProfilerRuleConfiguration runs as a rule evaluation job whose status the
training job's description reports. Here the rule evaluation is the image's own `rule_check.py` over
the job's tensors and profile (the rule named by RuleParameters["rule_to_invoke"], else by
RuleConfigurationName), run once the container has finished; the other RuleParameters are not
forwarded (the managed rules' parameter names are not the project's rules').
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from retrain.embedded.sagemaker.logs import PROCESSING_LOG_GROUP, LogShipper, log_stream_name
from retrain.embedded.sagemaker.s3io import S3Uri, upload_tree
from retrain_contract import container as contract
from retrain_contract import rules

HOOK_CONFIG_FILE = "debughookconfig.json"
DEFAULT_HOOK_LOCAL_PATH = contract.DEBUG_HOOK_LOCAL_PATH  # SageMaker's default LocalPath
RULE_KINDS = {
    "DebugRuleConfigurations": "DebugRuleEvaluationStatuses",
    "ProfilerRuleConfigurations": "ProfilerRuleEvaluationStatuses",
}
RULE_TIMEOUT_SECONDS = 600


def rule_name(configuration: dict[str, Any]) -> str:
    parameters = configuration.get("RuleParameters") or {}
    return str(parameters.get("rule_to_invoke") or configuration["RuleConfigurationName"])


def initial_statuses(
    request: dict[str, Any], arn_prefix: str, job_name: str
) -> dict[str, list[dict[str, Any]]]:
    """The InProgress rule statuses a training job with rules reports from its creation."""
    statuses: dict[str, list[dict[str, Any]]] = {}
    now = time.time()
    for config_key, status_key in RULE_KINDS.items():
        entries = []
        for configuration in request.get(config_key) or []:
            rule_job = f"{job_name[:40]}-{configuration['RuleConfigurationName'][:30]}-{secrets.token_hex(4)}"
            entries.append(
                {
                    "RuleConfigurationName": configuration["RuleConfigurationName"],
                    "RuleEvaluationJobArn": f"{arn_prefix}:processing-job/{rule_job.lower()}",
                    "RuleEvaluationStatus": "InProgress",
                    "LastModifiedTime": now,
                }
            )
        if entries:
            statuses[status_key] = entries
    return statuses


def hook_local_path(request: dict[str, Any], base: Path) -> Path | None:
    hook = request.get("DebugHookConfig")
    if not hook:
        return None
    local = str(hook.get("LocalPath") or DEFAULT_HOOK_LOCAL_PATH)
    prefix = contract.DEFAULT_BASE_DIR.rstrip("/") + "/"
    if not local.startswith(prefix):
        raise ValueError(f"DebugHookConfig.LocalPath {local!r} must be under {contract.DEFAULT_BASE_DIR}")
    return base / local[len(prefix) :]


def write_hook_config(request: dict[str, Any], base: Path) -> Path | None:
    """debughookconfig.json as SageMaker writes it, with LocalPath inside this job's tree."""
    local = hook_local_path(request, base)
    if local is None:
        return None
    local.mkdir(parents=True, exist_ok=True)
    config = {**request["DebugHookConfig"], "LocalPath": str(local)}
    path = base / "input" / "config" / HOOK_CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config), encoding="utf-8")
    return local


def upload_outputs(request: dict[str, Any], s3: Any, base: Path, output_data: Path, job_name: str) -> None:
    """Debugger tensors to <S3OutputPath>/<job>/debug-output, the profile to .../profiler-output."""
    hook = request.get("DebugHookConfig")
    local = hook_local_path(request, base)
    if hook and hook.get("S3OutputPath") and local is not None and local.is_dir():
        upload_tree(s3, local, S3Uri.parse(hook["S3OutputPath"]).join(job_name, "debug-output"))
    profiler = request.get("ProfilerConfig") or {}
    profile = output_data / contract.PROFILE_DIRNAME
    if profiler.get("S3OutputPath") and not profiler.get("DisableProfiler") and profile.is_dir():
        upload_tree(s3, profile, S3Uri.parse(profiler["S3OutputPath"]).join(job_name, "profiler-output"))


def evaluate_rules(
    request: dict[str, Any],
    statuses: dict[str, list[dict[str, Any]]],
    *,
    code_dir: Path,
    base: Path,
    job_dir: Path,
    logs: Any,
    job_name: str,
) -> dict[str, list[dict[str, Any]]]:
    """Run rule_check.py for every configured rule; the statuses with NoIssuesFound/IssuesFound/Error
    (RuleEvaluationStatus' values: the open mode's IssuesSuspected and InsufficientData are reported as
    NoIssuesFound, the verdict named in StatusDetails)."""
    configurations = {
        status_key: request.get(config_key) or [] for config_key, status_key in RULE_KINDS.items()
    }
    names = sorted({rule_name(c) for group in configurations.values() for c in group})
    if not names:
        return statuses
    output = job_dir / "rules"
    start = time.time()
    shipper = LogShipper(
        logs,
        PROCESSING_LOG_GROUP,
        log_stream_name(f"{job_name}-rules", contract.DEFAULT_HOST, start),
        job_dir / "logs" / "rules.log",
    )
    command = [
        sys.executable,
        "-u",
        str(code_dir / contract.RULE_CHECK_PROGRAM),
        "--input-dir",
        str(base / "output"),
        "--output-dir",
        str(output),
        "--rules",
        ",".join(names),
        "--no-report",
    ]
    results: dict[str, dict[str, Any]] = {}
    failure = ""
    try:
        completed = subprocess.run(
            command, cwd=code_dir, capture_output=True, text=True, timeout=RULE_TIMEOUT_SECONDS, check=False
        )
        for line in (completed.stdout + completed.stderr).splitlines():
            shipper.write(line)
        results_file = output / contract.RULE_RESULTS_FILE
        if results_file.is_file():
            results = {r["rule"]: r for r in json.loads(results_file.read_text(encoding="utf-8"))}
        else:
            lines = [line for line in (completed.stdout + completed.stderr).splitlines() if line.strip()]
            failure = f"rule evaluation exited {completed.returncode}: {lines[-1] if lines else 'no output'}"
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
        failure = f"rule evaluation failed: {exc}"
    finally:
        shipper.flush()
    now = time.time()
    updated: dict[str, list[dict[str, Any]]] = {}
    for status_key, entries in statuses.items():
        by_config = {c["RuleConfigurationName"]: c for c in configurations.get(status_key, [])}
        updated[status_key] = []
        for entry in entries:
            result = results.get(rule_name(by_config[entry["RuleConfigurationName"]]))
            if result is None:
                status, detail = "Error", failure or "the rule produced no result"
            else:
                status = str(result["status"])
                step = f" at step {result['step']}" if result.get("step") is not None else ""
                detail = f"{result.get('detail', '')}{step}".strip()
                if status in rules.WARN_ONLY:  # not in RuleEvaluationStatus' enum: AWS says no issues
                    status, detail = rules.NO_ISSUES, f"{status}: {detail}"
            updated[status_key].append(
                {
                    **entry,
                    "RuleEvaluationStatus": status,
                    "StatusDetails": detail[:1024],
                    "LastModifiedTime": now,
                }
            )
    return updated


def stop_statuses(statuses: dict[str, list[dict[str, Any]]], why: str) -> dict[str, list[dict[str, Any]]]:
    """Rules of a job that ended without completing are Stopped."""
    now = time.time()
    return {
        key: [
            {**e, "RuleEvaluationStatus": "Stopped", "StatusDetails": why, "LastModifiedTime": now}
            for e in entries
        ]
        for key, entries in statuses.items()
    }
