from __future__ import annotations

import boto3
import botocore.session
import pytest

from controller import names
from retrain.deployment import connect
from retrain.errors import NoCredentialsError, StackNotFoundError


def test_connect_reads_the_stack_outputs(stack):
    # GIVEN a stack whose Outputs name the data bucket
    # WHEN the CLI connects to it by name
    deployment = connect(stack.name)
    # THEN the outputs are read from CloudFormation under the control plane's output keys
    assert deployment.output(names.STACK_OUTPUTS["data_bucket"]) == "retrain-data-test"
    assert deployment.local is False


def test_unknown_stack_is_named_with_what_to_do(stack):
    # GIVEN no stack called "nope"
    # WHEN the CLI connects to it
    with pytest.raises(StackNotFoundError) as raised:
        connect("nope")
    # THEN the message names the stack, the region and how to deploy one
    assert "'nope' not found in us-east-1" in str(raised.value)
    assert "sam deploy --guided" in str(raised.value)


def test_missing_output_says_to_redeploy(stack):
    # GIVEN a stack from an older template (no such output)
    deployment = connect(stack.name)
    # WHEN a command needs an output the stack lacks
    with pytest.raises(StackNotFoundError) as raised:
        deployment.output("NoSuchOutput")
    # THEN the error says to redeploy
    assert "redeploy" in str(raised.value)


def test_no_credentials_says_how_to_configure(monkeypatch):
    # GIVEN a session with no credentials at all
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    core = botocore.session.Session()
    core.set_config_variable("credentials_file", "/dev/null")
    core.set_config_variable("config_file", "/dev/null")
    core.set_config_variable("metadata_service_num_attempts", 0)
    core.get_component("credential_provider").providers = []
    session = boto3.session.Session(botocore_session=core, region_name="us-east-1")
    # WHEN the CLI connects to a stack
    with pytest.raises(NoCredentialsError) as raised:
        connect("retrain", session=session)
    # THEN the message says how to configure credentials or use the embedded stack
    assert "aws configure" in str(raised.value)
    assert "retrain local up" in str(raised.value)
