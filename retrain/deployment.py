"""Where the CLI's AWS calls go: one deployed stack, found by name, its resources read from its Outputs.

The same code serves a stack on AWS (ordinary credentials) and the embedded emulation (AWS_ENDPOINT_URL
pointing at the local moto server): boto3 reads the endpoint from the environment or from `endpoint_url`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import boto3
import botocore.exceptions

from retrain.errors import NoCredentialsError, StackNotFoundError

if TYPE_CHECKING:
    from mypy_boto3_cloudformation import CloudFormationClient


@dataclass
class Deployment:
    """A stack and a way to make clients for the account and endpoint it lives in."""

    stack_name: str
    outputs: dict[str, str]
    session: boto3.session.Session
    endpoint_url: str | None = None
    clients: dict[str, Any] = field(default_factory=dict, repr=False)  # service -> client; injectable
    # The embedded stack's MLflow app (sagemaker-mlflow's SAGEMAKER_MLFLOW_CUSTOM_ENDPOINT); on AWS the
    # plugin finds the app's endpoint from its ARN.
    mlflow_endpoint: str | None = None

    @property
    def local(self) -> bool:
        return self.endpoint_url is not None

    def client(self, service: str) -> Any:
        """A cached boto3 client for `service` on this deployment's endpoint."""
        if service not in self.clients:
            session: Any = self.session
            self.clients[service] = session.client(service, endpoint_url=self.endpoint_url)
        return self.clients[service]

    def output(self, key: str) -> str:
        try:
            return self.outputs[key]
        except KeyError:
            raise StackNotFoundError(
                f"stack {self.stack_name!r} has no output {key!r}; it was deployed from another version "
                "of template.yaml: redeploy it with `sam build && sam deploy`"
            ) from None


def connect(
    stack_name: str,
    *,
    endpoint_url: str | None = None,
    session: boto3.session.Session | None = None,
    cloudformation: CloudFormationClient | None = None,
) -> Deployment:
    """Read the stack's Outputs; turn missing credentials and unknown stacks into guidance."""
    session = session or boto3.session.Session()
    cfn = cloudformation or session.client("cloudformation", endpoint_url=endpoint_url)
    try:
        response = cfn.describe_stacks(StackName=stack_name)
    except (botocore.exceptions.NoCredentialsError, botocore.exceptions.PartialCredentialsError):
        raise NoCredentialsError(
            "no AWS credentials found: run `aws configure` (or set AWS_PROFILE), or leave out --stack "
            "to use the embedded stack (`retrain local up`)"
        ) from None
    except botocore.exceptions.NoRegionError:
        raise NoCredentialsError(
            "no AWS region configured: run `aws configure` or set AWS_DEFAULT_REGION"
        ) from None
    except botocore.exceptions.ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        message = error.response.get("Error", {}).get("Message", "")
        if code == "ValidationError" and "does not exist" in message:
            region = cfn.meta.region_name
            raise StackNotFoundError(
                f"stack {stack_name!r} not found in {region}: check the name with "
                "`aws cloudformation list-stacks`, or deploy it with `sam deploy --guided`"
            ) from None
        if code in (
            "ExpiredToken",
            "ExpiredTokenException",
            "InvalidClientTokenId",
            "UnrecognizedClientException",
        ):
            raise NoCredentialsError(
                f"AWS rejected the credentials ({code}): refresh them (`aws sso login` or `aws configure`)"
            ) from None
        raise
    stacks = response.get("Stacks", [])
    if not stacks:
        raise StackNotFoundError(f"stack {stack_name!r} not found: deploy it with `sam deploy --guided`")
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", []) if "OutputKey" in o}
    return Deployment(stack_name=stack_name, outputs=outputs, session=session, endpoint_url=endpoint_url)
