"""train.py as SageMaker runs it, then rule_check.py over its output, as the Processing job does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from controller import config, gate
from retrain.dev.template_model import default_environment
from retrain_contract import container as contract
from retrain_training import rules

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CODE = REPO / "training_image"
HYPERPARAMETERS = {
    "model": "resnet18",
    "epochs": "3",
    "batch-size": "8",
    "image-size": "32",
    "num-workers": "0",
    "checkpoint-every-steps": "0",
    "debug-interval": "1",
    "profile-interval-ms": "100",
}
# The managed system rules wait for 1,000 data points; a run of eight steps needs a smaller patience,
# given the way RuleParameters would give it.
SHORT_RUN = {
    "CPUBottleneck": {"patience": 4},
    "IOBottleneck": {"patience": 4},
    "LowGPUUtilization": {"patience": 4},
}


def write_images(root: Path) -> None:
    """Three colours with noise, 12 JPEGs each: a learnable task."""
    rng = np.random.default_rng(0)
    for channel, label in enumerate(("red", "green", "blue")):
        (root / label).mkdir(parents=True)
        for i in range(12):
            pixels = rng.integers(0, 80, size=(32, 32, 3), dtype=np.uint8)
            pixels[..., channel] += 170
            Image.fromarray(pixels).save(root / label / f"{i:02d}.jpg")


def train(base: Path, **overrides: str) -> Path:
    """Run train.py; returns the output.tar.gz-equivalent directory (SM_OUTPUT_DATA_DIR)."""
    write_images(base / "input" / "data" / "train")
    args = [part for k, v in {**HYPERPARAMETERS, **overrides}.items() for part in (f"--{k}", v)]
    env = {
        **os.environ,
        contract.BASE_DIR_ENV: str(base),
        contract.JOB_NAME_ENV: "rules-test",
        "OMP_NUM_THREADS": "1",
    }
    result = subprocess.run(
        [sys.executable, str(CODE / contract.PROGRAM), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return contract.resolve_paths({contract.BASE_DIR_ENV: str(base)}).output_data_dir


def rule_check(input_dir: Path, output_dir: Path) -> tuple[int, dict[str, dict]]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [
            sys.executable,
            str(CODE / contract.RULE_CHECK_PROGRAM),
            "--input-dir",
            str(input_dir),
            "--output-dir",
            str(output_dir),
            "--rule-parameters",
            json.dumps(SHORT_RUN),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    results = json.loads((output_dir / contract.RULE_RESULTS_FILE).read_text())
    return result.returncode, {r["rule"]: r for r in results}


def test_a_healthy_training_job_passes_every_rule(tmp_path: Path) -> None:
    # GIVEN a short healthy train.py run, shipped as SageMaker ships it (output.tar.gz), with the facts the
    # rules read beside its tensors
    output = train(tmp_path / "job")
    facts = json.loads((output / contract.TRAINING_FACTS_FILE).read_text(encoding="utf-8"))
    assert facts["labels"] == 3 and facts["train_images"] + facts["validation_images"] == 36
    shipped = tmp_path / "processing-input"
    shipped.mkdir()
    with tarfile.open(shipped / "output.tar.gz", "w:gz") as tar:
        for child in output.iterdir():
            tar.add(child, arcname=child.name)

    # WHEN the rule check runs over it
    code, results = rule_check(shipped, tmp_path / "processing-output")

    # THEN every rule says NoIssuesFound and the bottleneck report is there
    assert code == 0
    assert {name: r["status"] for name, r in results.items()} == {
        name: rules.NO_ISSUES for name in rules.RULE_NAMES
    }
    assert (tmp_path / "processing-output" / "bottleneck" / "bottleneck.md").is_file()


def test_a_loader_that_sleeps_is_a_cpu_bottleneck_and_nothing_else(tmp_path: Path) -> None:
    # GIVEN a run whose loader sleeps 1 s per batch (the fault-injection hyperparameter)
    output = train(tmp_path / "job", **{"inject-loader-delay-ms": "1000", "epochs": "2"})

    # WHEN the rule check runs over its extracted output
    code, results = rule_check(output, tmp_path / "processing-output")

    # THEN CPUBottleneck alone finds issues (8 steps of 3 labels: LossNotDecreasing may warn that it cannot
    # tell), and the run is still a result (exit 0)
    assert code == 0
    statuses = {name: r["status"] for name, r in results.items()}
    assert {name for name, status in statuses.items() if status == rules.ISSUES} == {"CPUBottleneck"}
    assert set(statuses.values()) <= {rules.NO_ISSUES, rules.ISSUES, rules.SUSPECTED}
    assert "waited for data" in results["CPUBottleneck"]["detail"]
    # AND the stack's default gate registers the model with the finding as a warning: a slow loader makes
    # an expensive job, not a bad model
    decision = default_gate(results)
    assert decision["decision"] == "accepted"
    assert "CPUBottleneck found issues (warnings, not blocking)" in decision["reason"]


def default_gate(results: dict[str, dict]) -> dict[str, str]:  # type: ignore[type-arg]
    """The gate's decision with template.yaml's default BlockingRules, for a model as accurate as can be."""
    blocking = config.from_environ(default_environment("GateFunction")).blocking_rules
    verdicts = gate.with_actions(list(results.values()), blocking)  # type: ignore[arg-type]
    return dict(gate.decide(1.0, None, verdicts, gate.Thresholds(0.5, 0.0, blocking)))


def test_a_planted_vanishing_gradient_is_found_and_blocks_with_the_default_gate(tmp_path: Path) -> None:
    # GIVEN a run whose images reach the model as zeros (the fault-injection hyperparameter)
    output = train(tmp_path / "job", **{"inject-fault": contract.FAULT_VANISHING_GRADIENT, "epochs": "2"})

    # WHEN the rule check runs over its output
    code, results = rule_check(output, tmp_path / "processing-output")

    # THEN VanishingGradient finds the first layer's gradient gone while the loss stays high
    assert code == 0
    assert results["VanishingGradient"]["status"] == rules.ISSUES
    assert "stopped learning while the loss was still high" in results["VanishingGradient"]["detail"]
    # AND the stack's default gate rejects the model for it
    decision = default_gate(results)
    assert decision["decision"] == "rejected" and "VanishingGradient" in decision["reason"]
