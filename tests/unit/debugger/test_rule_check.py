from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from retrain_contract import container as contract
from retrain_training import rule_check, rules
from tests.unit.debugger.profiles import profiled_loop


def shipped_output(job: contract.Paths, into: Path) -> Path:
    """The job's output data packed as SageMaker packs SM_OUTPUT_DATA_DIR into output.tar.gz."""
    into.mkdir(parents=True)
    archive = into / "output.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for child in job.output_data_dir.iterdir():
            tar.add(child, arcname=child.name)
    return archive


def read_results(output: Path) -> list[dict]:
    return json.loads((output / contract.RULE_RESULTS_FILE).read_text())


def test_rule_check_reads_an_output_archive_and_writes_every_rules_result(
    healthy_run: contract.Paths, tmp_path: Path
) -> None:
    # GIVEN a healthy job's output.tar.gz holding its tensors and its profile
    profiled_loop(healthy_run.profile_dir, steps=10, compute_s=0.005, data_wait_s=0.0)
    shipped_output(healthy_run, tmp_path / "input")

    # WHEN the processing job runs over it
    code = rule_check.main(["--input-dir", str(tmp_path / "input"), "--output-dir", str(tmp_path / "out")])

    # THEN it exits 0 and writes one verdict per rule, in the contract's shape, plus the report: no issue,
    # except from the two system rules with a patience of 1,000, which 10 steps leave without a verdict
    results = read_results(tmp_path / "out")
    short = ("CPUBottleneck", "IOBottleneck")
    assert code == 0
    assert [r["rule"] for r in results] == list(rules.RULE_NAMES)
    assert {r["rule"]: r["status"] for r in results} == {
        name: rules.INSUFFICIENT_DATA if name in short else rules.NO_ISSUES for name in rules.RULE_NAMES
    }
    assert all("concludes after 1000" in r["detail"] for r in results if r["rule"] in short)
    assert all(set(r) == {"rule", "status", "step", "detail"} for r in results)
    assert (tmp_path / "out" / rule_check.BOTTLENECK_DIRNAME / "bottleneck.md").is_file()


def test_issues_found_are_a_result_not_a_failure(exploding_run: contract.Paths, tmp_path: Path) -> None:
    # GIVEN the extracted tensors of a run that exploded, with no profile
    code = rule_check.main(
        ["--input-dir", str(exploding_run.output_data_dir), "--output-dir", str(tmp_path / "out")]
    )

    # THEN the exit is 0, ExplodingTensor says IssuesFound and the system rules say Error (no profile)
    by_rule = {r["rule"]: r for r in read_results(tmp_path / "out")}
    assert code == 0
    assert by_rule["ExplodingTensor"]["status"] == rules.ISSUES
    assert by_rule["StepOutlier"]["status"] == rules.ERROR


def test_nothing_to_evaluate_exits_non_zero_and_still_says_why(tmp_path: Path) -> None:
    # GIVEN an input directory with neither tensors nor a profile
    (tmp_path / "input").mkdir()

    # WHEN the processing job runs
    code = rule_check.main(["--input-dir", str(tmp_path / "input"), "--output-dir", str(tmp_path / "out")])

    # THEN it exits non-zero and every rule's Error detail is in the results file
    assert code == rule_check.EXIT_NOT_EVALUATED
    assert {r["status"] for r in read_results(tmp_path / "out")} == {rules.ERROR}


def test_bad_rule_parameters_are_refused_naming_the_option(tmp_path: Path) -> None:
    (tmp_path / "input").mkdir()
    code = rule_check.main(
        [
            "--input-dir",
            str(tmp_path / "input"),
            "--output-dir",
            str(tmp_path / "o"),
            "--rule-parameters",
            "{",
        ]
    )
    assert code == rule_check.EXIT_NOT_EVALUATED
    assert not (tmp_path / "o" / contract.RULE_RESULTS_FILE).exists()


def test_defaults_are_under_the_processing_directory(tmp_path: Path) -> None:
    paths = contract.resolve_paths({contract.BASE_DIR_ENV: str(tmp_path)})
    args = rule_check.get_args_parser(paths).parse_args([])
    assert args.input_dir == tmp_path / "processing" / "input"
    assert args.output_dir == tmp_path / "processing" / "output"


def test_system_rule_patience_applies_to_every_system_rule_that_waits_unless_given_per_rule() -> None:
    # GIVEN a per-rule patience for CPUBottleneck and a stack-wide system-rule patience
    given = {"CPUBottleneck": {"patience": 7}, "Overfit": {"start_step": 3}}
    # WHEN they are merged
    merged = rule_check.with_patience(given, 5)
    # THEN the per-rule value wins, the other waiting system rules get 5, tensor rules keep theirs
    assert merged["CPUBottleneck"]["patience"] == 7
    assert merged["IOBottleneck"]["patience"] == 5
    assert merged["LowGPUUtilization"]["patience"] == 5
    assert merged["Overfit"] == {"start_step": 3}
    assert rule_check.with_patience(given, None) is given


def test_a_system_rule_patience_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="--system-rule-patience"):
        rule_check.with_patience({}, 0)
