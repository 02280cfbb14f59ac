"""The project's own template.yaml provisions on the embedded stack, with nothing left unwired."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller import names
from retrain.embedded.provisioning import wiring
from retrain.embedded.stack import EmbeddedStack

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_template_yaml_provisions_every_output_and_wires_every_runtime_resource(tmp_path: Path) -> None:
    with EmbeddedStack(tmp_path, parameter_overrides={"QuietPeriodSeconds": "5"}) as stack:
        described = stack.client("cloudformation").describe_stacks(StackName=stack.stack_name)["Stacks"][0]
        outputs = {o["OutputKey"]: o["OutputValue"] for o in described["Outputs"]}
        assert stack.wiring is not None
        unwired = wiring.unwired(stack.translated, stack.wiring)
        ingest = next(s for s in stack.wiring.functions.values() if s.logical_id == "IngestFunction")

    assert set(names.STACK_OUTPUTS.values()) <= set(outputs)
    assert unwired == []
    assert stack.degraded == []
    assert ingest.environment[names.ENV_QUIET_PERIOD_SECONDS] == "5"
    assert ingest.environment[names.ENV_DATA_BUCKET] == outputs[names.STACK_OUTPUTS["data_bucket"]]
