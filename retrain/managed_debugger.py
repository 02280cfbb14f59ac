"""Managed SageMaker Debugger configuration, for accounts that still have it (DebuggerMode=managed).

Builds the CreateTrainingJob fields DebugHookConfig, DebugRuleConfigurations, ProfilerConfig and
ProfilerRuleConfigurations for the built-in rules that retrain's open rules mirror, with the
region's rule evaluator image, through sagemaker-core (offline). The state machine cannot call
Python, so `python -m retrain.managed_debugger --region R` prints the JSON its literals must match,
and tests compare the template/ASL with `build_configs` and `rule_evaluator_images`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any, TypedDict

from retrain_contract import container, rules

TENSOR_RULES = rules.TENSOR_RULES
PROFILER_RULES = rules.SYSTEM_RULES
COLLECTIONS = ("losses", "gradients", "weights")  # what training_image/debugger.py saves in open mode
DEFAULT_SAVE_INTERVAL = int(str(container.HYPERPARAMETER_DEFAULTS[container.HP_DEBUG_INTERVAL]))
DEFAULT_PROFILING_INTERVAL_MS = int(str(container.HYPERPARAMETER_DEFAULTS[container.HP_PROFILE_INTERVAL_MS]))
LOCAL_TENSORS_PATH = container.DEBUG_HOOK_LOCAL_PATH  # smdebug's default LocalPath on SageMaker
DEBUGGER_MODES = ("open", "managed", "off")

_TENSOR_RULE_CONFIGS = {
    "VanishingGradient": "vanishing_gradient",
    "ExplodingTensor": "exploding_tensor",
    "LossNotDecreasing": "loss_not_decreasing",
    "Overfit": "overfit",
}


class ManagedConfigs(TypedDict):
    DebugHookConfig: dict[str, Any]
    DebugRuleConfigurations: list[dict[str, Any]]
    ProfilerConfig: dict[str, Any]
    ProfilerRuleConfigurations: list[dict[str, Any]]


def _debugger() -> Any:
    from sagemaker.core import debugger  # type: ignore[import-untyped]

    return debugger


def rule_evaluator_image(region: str) -> str:
    """The Debugger rule evaluator image URI of a region (sagemaker-core's table; no network)."""
    try:
        return str(_debugger().get_rule_container_image_uri("VanishingGradient", region))
    except ValueError as error:
        raise ValueError(f"no Debugger rule evaluator image for region {region!r}: {error}") from error


def rule_evaluator_images(regions: Iterable[str]) -> dict[str, str]:
    return {region: rule_evaluator_image(region) for region in regions}


def sagemaker_regions() -> list[str]:
    """Every region that offers SageMaker, in every partition (botocore's endpoint data)."""
    import botocore.session

    session = botocore.session.get_session()
    return sorted(
        region
        for partition in session.get_available_partitions()
        for region in session.get_available_regions("sagemaker", partition)
    )


def rule_image_accounts() -> dict[str, str]:
    """Region -> account of its Debugger rule evaluator image, for every SageMaker region ('' where
    sagemaker-core knows no image: managed Debugger cannot run there, open mode can)."""
    accounts: dict[str, str] = {}
    for region in sagemaker_regions():
        try:
            accounts[region] = rule_evaluator_image(region).split(".", 1)[0]
        except ValueError:
            accounts[region] = ""
    return accounts


def template_mapping() -> str:
    """template.yaml's DebuggerRuleImages mapping and the managed-mode region list, as YAML lines."""
    accounts = rule_image_accounts()
    rows = [f'    {region}: {{Account: "{account}"}}' for region, account in accounts.items()]
    supported = ", ".join(region for region, account in accounts.items() if account)
    return "\n".join(["  DebuggerRuleImages:", *rows, f"# regions with an image: [{supported}]"])


def _interval(collection: str, save_interval: int) -> int:
    """Losses are saved at least every DEBUG_LOSS_INTERVAL steps (the rules average windows of them)."""
    return min(save_interval, container.DEBUG_LOSS_INTERVAL) if collection == "losses" else save_interval


def build_configs(
    region: str,
    *,
    s3_output_path: str | None = None,
    save_interval: int = DEFAULT_SAVE_INTERVAL,
    profiling_interval_ms: int = DEFAULT_PROFILING_INTERVAL_MS,
) -> ManagedConfigs:
    """The four CreateTrainingJob fields. Without s3_output_path the S3OutputPath keys are left
    out, for the state machine to fill per run (`S3OutputPath.$`)."""
    debugger = _debugger()
    image = rule_evaluator_image(region)
    rules = []
    for name in TENSOR_RULES:
        rule = debugger.Rule.sagemaker(getattr(debugger.rule_configs, _TENSOR_RULE_CONFIGS[name])())
        rule.image_uri = image
        rules.append(rule.to_debugger_rule_config_dict())
    profiler_rules = []
    for name in PROFILER_RULES:
        rule = debugger.ProfilerRule.sagemaker(getattr(debugger.rule_configs, name)())
        rule.image_uri = image
        profiler_rules.append(rule.to_profiler_rule_config_dict())
    hook = debugger.DebuggerHookConfig(
        s3_output_path=s3_output_path,
        container_local_output_path=LOCAL_TENSORS_PATH,
        hook_parameters={"save_interval": str(save_interval)},
        collection_configs=[
            debugger.CollectionConfig(name, parameters={"save_interval": str(_interval(name, save_interval))})
            for name in COLLECTIONS
        ],
    )._to_request_dict()
    profiler = debugger.ProfilerConfig(
        s3_output_path=s3_output_path, system_monitor_interval_millis=profiling_interval_ms
    )._to_request_dict()
    if s3_output_path is None:
        hook.pop("S3OutputPath", None)
        profiler.pop("S3OutputPath", None)
    return ManagedConfigs(
        DebugHookConfig=hook,
        DebugRuleConfigurations=rules,
        ProfilerConfig=profiler,
        ProfilerRuleConfigurations=profiler_rules,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retrain.managed_debugger", description=__doc__)
    parser.add_argument("--region", help="AWS region, e.g. us-east-1")
    parser.add_argument(
        "--template-mapping", action="store_true", help="print template.yaml's DebuggerRuleImages mapping"
    )
    parser.add_argument("--s3-output-path", default=None, help="s3:// prefix for tensors and profile")
    parser.add_argument("--save-interval", type=int, default=DEFAULT_SAVE_INTERVAL)
    parser.add_argument("--profiling-interval-ms", type=int, default=DEFAULT_PROFILING_INTERVAL_MS)
    args = parser.parse_args(argv)
    if args.template_mapping:
        print(template_mapping())
        return 0
    if not args.region:
        parser.error("give --region REGION (or --template-mapping)")
    try:
        configs = build_configs(
            args.region,
            s3_output_path=args.s3_output_path,
            save_interval=args.save_interval,
            profiling_interval_ms=args.profiling_interval_ms,
        )
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    print(json.dumps(configs, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
