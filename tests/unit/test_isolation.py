"""The suite's own guard: nothing in a test can reach real AWS."""

from __future__ import annotations

import os
import socket

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import EndpointConnectionError


def test_credentials_are_fake() -> None:
    # GIVEN the test environment WHEN boto3 resolves credentials THEN they are the fake ones
    creds = boto3.session.Session().get_credentials()
    assert creds is not None
    assert creds.access_key == "testing"
    assert os.environ["AWS_DEFAULT_REGION"] == "us-east-1"


def test_outbound_connection_is_refused() -> None:
    # GIVEN the guard WHEN a test connects to a public address THEN it is refused before any packet
    with pytest.raises(OSError, match="only connect to this machine"), socket.socket() as sock:
        sock.connect(("52.94.236.248", 443))


def test_real_aws_endpoint_cannot_be_resolved() -> None:
    # GIVEN no mock WHEN boto3 calls AWS THEN the call fails locally instead of reaching AWS
    client = boto3.client("s3", config=Config(retries={"max_attempts": 1}))
    with pytest.raises((EndpointConnectionError, OSError)):
        client.list_buckets()
