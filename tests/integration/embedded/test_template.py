"""The project's own template.yaml provisions on the embedded stack, with nothing left unwired."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller import names
from retrain.embedded.provisioning import wiring
from retrain.embedded.provisioning.sam import load_template
from retrain.embedded.stack import EmbeddedStack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_template_yaml_provisions_every_output_and_wires_every_runtime_resource(tmp_path: Path) -> None:
    # MlflowTracking=create: every resource and output of the template, the MLflow app's among them; the
    # ledger pre-warmed (its WarmThroughput on the table and the index)
    overrides = {"QuietPeriodSeconds": "5", "MlflowTracking": "create", "LedgerWarmWriteUnits": "8000"}
    with EmbeddedStack(tmp_path, parameter_overrides=overrides) as stack:
        described = stack.client("cloudformation").describe_stacks(StackName=stack.stack_name)["Stacks"][0]
        outputs = {o["OutputKey"]: o["OutputValue"] for o in described["Outputs"]}
        ledger = stack.client("dynamodb").describe_table(
            TableName=outputs[names.STACK_OUTPUTS["ledger_table"]]
        )
        queues = stack.client("sqs").list_queues()["QueueUrls"]
        assert stack.wiring is not None
        unwired = wiring.unwired(stack.translated, stack.wiring)
        ingest = next(s for s in stack.wiring.functions.values() if s.logical_id == "IngestFunction")
        specs = list(stack.wiring.functions.values())

    assert set(names.STACK_OUTPUTS.values()) <= set(outputs)
    assert unwired == []
    assert stack.degraded == []
    assert ingest.environment[names.ENV_QUIET_PERIOD_SECONDS] == "5"
    # the queue's URL as CloudFormation gives it (SQS reads the queue from its path, whatever the host)
    assert ingest.environment[names.ENV_INGEST_QUEUE_URL].rsplit("/", 1)[1] in {
        q.rsplit("/", 1)[1] for q in queues
    }
    # LedgerWarmWriteUnits pre-warms the table and its pending index alike
    assert ledger["Table"]["WarmThroughput"]["WriteUnitsPerSecond"] == 8000
    assert ledger["Table"]["GlobalSecondaryIndexes"][0]["WarmThroughput"]["WriteUnitsPerSecond"] == 8000
    assert ingest.environment[names.ENV_DATA_BUCKET] == outputs[names.STACK_OUTPUTS["data_bucket"]]
    # Every function runs from sam build's output of functions/ (its requirements installed) on the
    # template's runtime, with the contract layer's build: never from the source tree.
    runtime = load_template(REPO_ROOT / "template.yaml")["Globals"]["Function"]["Runtime"]
    for spec in specs:
        assert spec.runtime == runtime
        assert spec.code_dir.is_relative_to(stack.build_root)
        assert (spec.code_dir / "controller" / "ingest.py").is_file()
        assert (spec.code_dir / "aws_lambda_powertools").is_dir()
        assert (spec.layers[0] / "python" / "retrain_contract" / "container.py").is_file()
        # MLflow's client is in the tracking function's second layer, and in no other function
        mlflow = [layer for layer in spec.layers[1:] if (layer / "python" / "mlflow").is_dir()]
        assert len(mlflow) == (spec.logical_id == "TrackingFunction"), spec.logical_id
        assert not (spec.code_dir / "mlflow").exists()
    assert outputs[names.STACK_OUTPUTS["mlflow"]].startswith("arn:aws:sagemaker:us-east-1:")
