"""The control plane's copies of the container contract (Lambda package and ASL) equal contract.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import contract
from controller import container, names

ASL = Path(__file__).resolve().parents[3] / "statemachine" / "training.asl.json"


def _states(definition: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every state, including those inside Parallel branches."""
    found: dict[str, dict[str, Any]] = {}
    for name, state in definition["States"].items():
        found[name] = state
        for branch in state.get("Branches", []):
            found.update(_states(branch))
    return found


@pytest.fixture(scope="module")
def states() -> dict[str, dict[str, Any]]:
    return _states(json.loads(ASL.read_text()))


def _tasks(states: dict[str, dict[str, Any]], resource_suffix: str) -> list[dict[str, Any]]:
    return [s for s in states.values() if s.get("Resource", "").endswith(resource_suffix)]


def test_lambda_package_copies_match_the_contract():
    assert container.PROGRAM == contract.PROGRAM
    assert container.EVALUATE_PROGRAM == contract.EVALUATE_PROGRAM
    assert container.RULE_CHECK_PROGRAM == contract.RULE_CHECK_PROGRAM
    assert (container.CHANNEL_TRAIN, container.CHANNEL_MANIFEST) == (
        contract.CHANNEL_TRAIN,
        contract.CHANNEL_MANIFEST,
    )
    assert container.MANIFEST_FILE == contract.MANIFEST_FILE
    assert (container.MANIFEST_PATH_KEY, container.MANIFEST_LABEL_KEY, container.MANIFEST_SPLIT_KEY) == (
        contract.MANIFEST_PATH_KEY,
        contract.MANIFEST_LABEL_KEY,
        contract.MANIFEST_SPLIT_KEY,
    )
    assert (container.SPLIT_TRAIN, container.SPLIT_VALIDATION) == (
        contract.SPLIT_TRAIN,
        contract.SPLIT_VALIDATION,
    )
    [val_fraction] = [h.default for h in contract.HYPERPARAMETERS if h.name == "val-fraction"]
    assert val_fraction == container.VAL_FRACTION_DEFAULT
    assert container.IMAGE_EXTENSIONS == contract.IMAGE_EXTENSIONS == names.IMAGE_EXTENSIONS
    assert (container.EVALUATION_FILE, container.RULE_RESULTS_FILE, container.TRAINING_SKIPPED_KEY) == (
        contract.EVALUATION_FILE,
        contract.RULE_RESULTS_FILE,
        contract.TRAINING_SKIPPED_KEY,
    )
    assert (container.CHECKPOINT_PREFIX, container.CHECKPOINT_SUFFIX) == (
        contract.CHECKPOINT_PREFIX,
        contract.CHECKPOINT_SUFFIX,
    )
    assert (container.OBJECTIVE_METRIC, container.OBJECTIVE_TYPE) == (
        contract.OBJECTIVE_METRIC,
        contract.OBJECTIVE_TYPE,
    )
    assert (container.MODELS, container.OPTIMIZERS) == (contract.MODELS, contract.OPTIMIZERS)
    assert container.HYPERPARAMETER_NAMES == contract.HYPERPARAMETER_NAMES
    assert set(container.TUNED_HYPERPARAMETERS) <= set(contract.HYPERPARAMETER_NAMES)


def test_checkpoint_keys_parse_like_the_contract_names_them():
    # GIVEN a checkpoint key as the container writes it under a run's checkpoint prefix
    key = (
        names.checkpoint_prefix("flowers", "flowers-00001") + f"job-1/algo-1/{contract.checkpoint_name(150)}"
    )
    # THEN the control plane finds the run and the step in it
    match = names.CHECKPOINT_KEY_RE.match(key)
    assert match is not None
    assert (match["dataset"], match["run_id"], match["job"], int(match["step"])) == (
        "flowers",
        "flowers-00001",
        "job-1",
        150,
    )


def test_every_training_state_carries_the_contract_metric_definitions(states):
    definitions = [dict(d) for d in contract.METRIC_DEFINITIONS]
    tuning = _tasks(states, "createHyperParameterTuningJob.sync")
    training = _tasks(states, "createTrainingJob.sync")
    assert len(tuning) == 2 and len(training) == 2
    for state in tuning:
        spec = state["Parameters"]["TrainingJobDefinition"]["AlgorithmSpecification"]
        assert spec["MetricDefinitions"] == definitions
        objective = state["Parameters"]["HyperParameterTuningJobConfig"]["HyperParameterTuningJobObjective"]
        assert objective == {"Type": contract.OBJECTIVE_TYPE, "MetricName": contract.OBJECTIVE_METRIC}
    for state in training:
        assert state["Parameters"]["AlgorithmSpecification"]["MetricDefinitions"] == definitions


def test_tuned_hyperparameters_and_channels_are_contract_names(states):
    for state in _tasks(states, "createHyperParameterTuningJob.sync"):
        config = state["Parameters"]["HyperParameterTuningJobConfig"]["ParameterRanges"]
        ranges = [r for kind in config.values() for r in kind]
        assert {r["Name"] for r in ranges} == set(container.TUNED_HYPERPARAMETERS)
        assert {r["Name"] for r in ranges} <= set(contract.HYPERPARAMETER_NAMES)
        # the optimizers come from the run (stack parameter Optimizers, checked against the contract's)
        [optimizer] = config["CategoricalParameterRanges"]
        assert optimizer["Values.$"] == "$.run.ranges.optimizers"
        channels = state["Parameters"]["TrainingJobDefinition"]["InputDataConfig"]
        assert [c["ChannelName"] for c in channels] == [contract.CHANNEL_TRAIN, contract.CHANNEL_MANIFEST]
        assert state["Parameters"]["TrainingJobDefinition"]["Environment"] == {
            contract.PROGRAM_ENV: contract.PROGRAM
        }


def test_processing_states_run_the_contract_programs(states):
    programs = [
        s["Parameters"]["AppSpecification"]["ContainerEntrypoint"][-1]
        for s in _tasks(states, "createProcessingJob.sync")
    ]
    assert sorted(Path(p).name for p in programs) == sorted(
        [contract.EVALUATE_PROGRAM, contract.EVALUATE_PROGRAM, contract.RULE_CHECK_PROGRAM]
    )


def test_job_tags_in_the_asl_are_the_control_plane_tag_names(states):
    keys = {
        tag["Key"]
        for state in states.values()
        if state.get("Resource", "").startswith("arn:aws:states:::sagemaker:")
        for tag in state["Parameters"].get("Tags", [])
    }
    assert keys == {names.TAG_DATASET, names.TAG_RUN_ID}


def test_every_task_retries_transient_errors_and_every_top_level_task_catches():
    definition = json.loads(ASL.read_text())
    top_level = definition["States"]
    for name, state in _states(definition).items():
        if state["Type"] != "Task":
            continue
        assert state.get("Retry"), f"{name} has no Retry"
        if name in top_level:
            assert state.get("Catch"), f"{name} has no Catch"
    for name, state in top_level.items():
        if state["Type"] == "Parallel":
            assert state.get("Catch"), f"{name} has no Catch"


def test_the_control_planes_split_rule_is_the_containers():
    import data

    keys = [f"{label}/img_{i:04d}.jpg" for label in ("cat", "lynx", "été") for i in range(400)]
    for fraction in (0.1, 0.2, 0.5):
        assert [container.in_validation(k, fraction) for k in keys] == [
            data.in_validation(k, fraction) for k in keys
        ]
