"""Fault configuration: parsing the demo's --fault options and firing each fault the set number of times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from retrain.embedded.faults import (
    LOADER_DELAY_HYPERPARAMETER,
    RULE_FINDS_ISSUES_DELAY_MS,
    WORKERS_HYPERPARAMETER,
    FaultingSageMaker,
    Faults,
    FaultSpecError,
)


def test_throttle_fires_the_given_number_of_times_then_stops() -> None:
    faults = Faults.parse(["throttle:2"])

    codes = [faults.create_training_job_error("job") for _ in range(3)]

    assert codes == ["ThrottlingException", "ThrottlingException", None]


def test_checkpoint_kill_and_import_failure_fire_once() -> None:
    faults = Faults.parse(["kill-checkpoint-write", "import-fails"])

    assert [faults.kill_during_checkpoint_write("j") for _ in range(2)] == [True, False]
    assert [faults.import_task_fails("fs-1") for _ in range(2)] == [True, False]


def test_no_faults_fire_nothing() -> None:
    faults = Faults()

    assert faults.create_training_job_error("j") is None
    assert not faults.kill_during_checkpoint_write("j")
    assert not faults.import_task_fails("fs")


def test_unknown_fault_names_the_known_ones() -> None:
    with pytest.raises(FaultSpecError, match=r"unknown fault 'explode'.*import-fails"):
        Faults.parse(["explode"])


def test_count_must_be_a_number() -> None:
    with pytest.raises(FaultSpecError, match="whole number"):
        Faults.parse(["resource-limit:many"])


def test_config_round_trips_through_the_state_directory(tmp_path: Path) -> None:
    faults = Faults.parse(["resource-limit:3", "rule-finds-issues"])

    faults.save(tmp_path / "faults.json")

    assert Faults.load(tmp_path / "faults.json") == faults


class _Recorder:
    def __init__(self) -> None:
        self.requests: list[dict[str, object]] = []

    def create_hyper_parameter_tuning_job(self, **request: object) -> dict[str, object]:
        self.requests.append(request)
        return {}


def _trial_hyperparameters(fault: str) -> Any:
    """The static hyperparameters of a tuning job with `epochs` 1, created through a proxy planting `fault`,
    as the service receives them."""
    service = _Recorder()
    proxy = FaultingSageMaker(service, Faults.parse([fault]))
    proxy.create_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="t", TrainingJobDefinition={"StaticHyperParameters": {"epochs": "1"}}
    )
    return service.requests[0]["TrainingJobDefinition"]["StaticHyperParameters"]  # type: ignore[index]


def test_rule_fault_sets_the_loader_delay_on_every_tuning_trial() -> None:
    static = _trial_hyperparameters("rule-finds-issues")

    assert static[LOADER_DELAY_HYPERPARAMETER] == str(RULE_FINDS_ISSUES_DELAY_MS)
    assert static[WORKERS_HYPERPARAMETER] == "0"
    assert static["epochs"] == "1"


def test_a_planted_vanishing_gradient_sets_the_containers_fault_knob_and_nothing_else() -> None:
    # GIVEN the training fault alone WHEN a tuning job is created through the faulting proxy
    static = _trial_hyperparameters("vanishing-gradient")
    # THEN every trial plants the fault, with its loader left as the stack set it
    assert static == {"epochs": "1", "inject-fault": "vanishing-gradient"}
    # AND a value the container does not know is refused when parsed
    with pytest.raises(FaultSpecError, match="unknown fault 'vanishing-gradient:2'"):
        Faults.parse(["vanishing-gradient:2"])


def test_rule_finds_issues_lowers_the_system_rule_patience_so_a_short_run_can_conclude() -> None:
    # GIVEN the rule fault, and no fault WHEN the stack asks for parameter overrides
    # THEN only the fault lowers SystemRulePatience, a parameter template.yaml declares
    overrides = Faults.parse(["rule-finds-issues"]).parameter_overrides()
    assert overrides == {"SystemRulePatience": "5"}
    assert Faults().parameter_overrides() == {}
    assert "SystemRulePatience:" in (Path(__file__).resolve().parents[3] / "template.yaml").read_text()
