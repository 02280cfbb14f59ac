"""Processing-job entry point: evaluate the Debugger rules over one training job's tensors and profile.

Input (default `<base>/processing/input`): the job's `tensors/` and `profile/` directories, anywhere
below, or the job's `output.tar.gz` (SageMaker's packing of SM_OUTPUT_DATA_DIR). Output (default
`<base>/processing/output`): rule_results.json, a list of {rule, status, step, detail}, and the
bottleneck report. Issues found are a result: exit 0. Exit 1 only when no rule could be evaluated.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from retrain_contract import container as contract
from retrain_training import rules

log = logging.getLogger("rule_check")
EXIT_NOT_EVALUATED = 1
BOTTLENECK_DIRNAME = "bottleneck"


def get_args_parser(paths: contract.Paths | None = None) -> argparse.ArgumentParser:
    paths = paths or contract.resolve_paths()
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--input-dir", type=Path, default=paths.processing_dir / "input")
    parser.add_argument("--output-dir", type=Path, default=paths.processing_dir / "output")
    parser.add_argument(
        "--rules", default=",".join(rules.RULE_NAMES), help="comma-separated rule names (default: all)"
    )
    parser.add_argument(
        "--rule-parameters",
        default="{}",
        help='JSON {"RuleName": {"parameter": value}}, like RuleParameters of the managed rules',
    )
    parser.add_argument(
        "--system-rule-patience",
        type=int,
        default=None,
        help="data points the system rules wait for before concluding (managed default 1000); "
        "a patience in --rule-parameters wins",
    )
    parser.add_argument("--no-report", action="store_true", help="skip the bottleneck report")
    return parser


def _find_dir(root: Path, name: str) -> Path | None:
    candidates = sorted((p for p in root.rglob(name) if p.is_dir()), key=lambda p: len(p.parts))
    return candidates[0] if candidates else None


def locate(input_dir: Path, scratch: Path) -> tuple[Path, Path]:
    """The tensors and profile directories under input_dir, unpacking any output.tar.gz first."""
    if not input_dir.is_dir():
        raise FileNotFoundError(
            f"input directory {input_dir} does not exist; give the training job's output (tensors/ and "
            "profile/, or output.tar.gz) as the processing input"
        )
    for number, archive in enumerate(sorted(input_dir.rglob("*.tar.gz"))):
        target = scratch / f"archive-{number}"
        target.mkdir(parents=True)
        with tarfile.open(archive) as tar:
            tar.extractall(target, filter="data")
    roots = [input_dir, scratch]
    tensors = next((d for r in roots if (d := _find_dir(r, contract.TENSORS_DIRNAME))), None)
    profile = next((d for r in roots if (d := _find_dir(r, contract.PROFILE_DIRNAME))), None)
    return (
        tensors or input_dir / contract.TENSORS_DIRNAME,
        profile or input_dir / contract.PROFILE_DIRNAME,
    )


def parse_parameters(text: str) -> dict[str, dict[str, Any]]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"--rule-parameters is not JSON ({error}): {text!r}") from error
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise ValueError(
            f'--rule-parameters must look like {{"RuleName": {{"parameter": value}}}}, got {text!r}'
        )
    return value


def with_patience(parameters: dict[str, dict[str, Any]], patience: int | None) -> dict[str, dict[str, Any]]:
    """`parameters` with `patience` set for every system rule that has one and was not given one."""
    if patience is None:
        return parameters
    if patience < 1:
        raise ValueError(f"--system-rule-patience must be at least 1, got {patience}")
    merged = {name: dict(values) for name, values in parameters.items()}
    for name, rule in rules.SYSTEM_RULES.items():
        if "patience" in inspect.signature(rule).parameters:
            merged.setdefault(name, {}).setdefault("patience", patience)
    return merged


def check(args: argparse.Namespace) -> list[rules.RuleResult]:
    names = tuple(n.strip() for n in args.rules.split(",") if n.strip())
    parameters = with_patience(parse_parameters(args.rule_parameters), args.system_rule_patience)
    with tempfile.TemporaryDirectory(prefix="rule-check-") as scratch:
        tensors_dir, profile_dir = locate(args.input_dir, Path(scratch))
        log.info("tensors: %s, profile: %s", tensors_dir, profile_dir)
        results = rules.evaluate(tensors_dir, profile_dir, parameters, names)
        args.output_dir.mkdir(parents=True, exist_ok=True)
        (args.output_dir / contract.RULE_RESULTS_FILE).write_text(
            json.dumps([r.to_dict() for r in results], indent=2) + "\n", encoding="utf-8"
        )
        if not args.no_report and profile_dir.is_dir():
            try:
                from retrain_training import bottleneck_report

                bottleneck_report.write_report(profile_dir, args.output_dir / BOTTLENECK_DIRNAME)
            except Exception:  # the report is a bonus; the rule results are the job's result
                log.exception("bottleneck report failed")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = get_args_parser().parse_args(argv)
    try:
        results = check(args)
    except (ValueError, FileNotFoundError) as error:
        log.error("%s", error)
        return EXIT_NOT_EVALUATED
    for result in results:
        log.info(
            "%s: %s%s %s",
            result.rule,
            result.status,
            f" at step {result.step}" if result.step is not None else "",
            result.detail,
        )
    if all(r.status == rules.ERROR for r in results):
        log.error("no rule could be evaluated: %s", results[0].detail if results else "no rules selected")
        return EXIT_NOT_EVALUATED
    return 0


if __name__ == "__main__":
    sys.exit(main())
