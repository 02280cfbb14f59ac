"""Real-time hosting: models, endpoint configurations, endpoints and InvokeEndpoint.

CreateModel takes a container (Image, ModelDataUrl, Environment) or a ModelPackageName, whose
InferenceSpecification gives them (a versioned package must be Approved, as the service requires).
CreateEndpoint starts the endpoint `Creating` and deploys it on a thread, as SageMaker does: the model
data is read from S3 as the model's execution role (whose permission to pull the image is checked), laid
out as the container's /opt/ml/model, and the serving container starts (`serving_toolkit.py`, the
inference toolkit's contract, as the first process of Linux namespaces of its own, container.py) with
the interpreter standing in for the PyTorch inference image: a virtualenv of only torch, numpy and
Pillow (SERVING_REQUIREMENTS), so the handler imports everything else from the model's own code/. Once
`GET /ping` answers the endpoint is `InService`; a container that exits first leaves it `Failed` with
its last log line. InvokeEndpoint posts the request to `/invocations`; a status other than 2xx becomes
the ModelError SageMaker answers (OriginalStatusCode, OriginalMessage, LogStreamArn). Endpoints run as
long as the embedded stack: they are not restored after a restart. Each endpoint has one instance of
its one production variant.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import socket
import sys
import tarfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from botocore.exceptions import ClientError

from retrain.embedded.sagemaker import listing
from retrain.embedded.sagemaker.container import Container, ContainerSpec, container_environment
from retrain.embedded.sagemaker.errors import validation
from retrain.embedded.sagemaker.image import IMAGE_ENVIRONMENTS, ContainerImage, image_environment
from retrain.embedded.sagemaker.s3io import S3Uri
from retrain.embedded.sagemaker.training import JobContext
from retrain_contract import container as contract

SERVING_REQUIREMENTS: Final = Path(__file__).with_name("serving-image.txt")
TOOLKIT: Final = Path(__file__).with_name("serving_toolkit.py")
MODEL_ERROR_STATUS: Final = 424
STARTUP_TIMEOUT_SECONDS: Final = 600.0  # ContainerStartupHealthCheckTimeoutInSeconds' default ceiling
INVOCATION_TIMEOUT_SECONDS: Final = 60.0  # a real-time endpoint answers within 60 s
PING_INTERVAL_SECONDS: Final = 0.2
STOP_GRACE_SECONDS: Final = 5.0
CONTAINER_HOST: Final = "primary"


@dataclass(frozen=True)
class Invocation:
    """InvokeEndpoint's answer: the HTTP status, headers and body the service sends."""

    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class Endpoint:
    name: str
    arn: str
    config_name: str
    created: datetime
    status: str = "Creating"
    modified: datetime = field(default_factory=lambda: datetime.now(UTC))
    failure: str = ""
    port: int = 0
    container: Container | None = None
    image: str = ""
    variant: str = ""
    instance_type: str = ""
    directory: Path | None = None
    deleted: bool = False


def _now() -> datetime:
    return datetime.now(UTC)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Hosting:
    """The hosting API of one account and region; methods take and return boto3's shapes."""

    def __init__(
        self,
        workdir: Path,
        context: JobContext,
        describe_package: Callable[[str], dict[str, Any]],
        *,
        region: str,
        account_id: str,
    ) -> None:
        self.workdir = workdir
        self.context = context
        self.describe_package = describe_package
        self.region, self.account_id = region, account_id
        self.models: dict[str, dict[str, Any]] = {}
        self.configs: dict[str, dict[str, Any]] = {}
        self.endpoints: dict[str, Endpoint] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._image: ContainerImage | None = None

    def _arn(self, kind: str, name: str) -> str:
        return f"arn:aws:sagemaker:{self.region}:{self.account_id}:{kind}/{name.lower()}"

    # -- models ------------------------------------------------------------------------------------

    def create_model(self, **request: Any) -> dict[str, Any]:
        operation = "CreateModel"
        listing.check_request(operation, request)
        name = str(request["ModelName"])
        given = request.get("PrimaryContainer") or (request.get("Containers") or [None])[0]
        if given is None:
            raise validation("CreateModel needs a PrimaryContainer (or Containers)", operation)
        if len(request.get("Containers") or []) > 1:
            raise validation(
                "the embedded stack hosts one container per model; give PrimaryContainer", operation
            )
        container = self._container(dict(given), operation)
        arn = self._arn("model", name)
        with self._lock:
            if name in self.models:
                raise validation(f'Cannot create already existing model "{arn}".', operation)
            self.models[name] = {
                "ModelName": name,
                "ModelArn": arn,
                "PrimaryContainer": dict(given),
                "ExecutionRoleArn": request.get("ExecutionRoleArn", ""),
                "EnableNetworkIsolation": bool(request.get("EnableNetworkIsolation", False)),
                "CreationTime": _now(),
                "resolved": container,
            }
        return {"ModelArn": arn}

    def _container(self, given: dict[str, Any], operation: str) -> dict[str, Any]:
        """Image, ModelDataUrl and Environment of a container definition, from its package if it names one."""
        package_name = given.get("ModelPackageName")
        if not package_name:
            if not given.get("Image"):
                raise validation("the container definition needs an Image or a ModelPackageName", operation)
            return {k: given.get(k) for k in ("Image", "ModelDataUrl", "Environment")}
        try:
            package = self.describe_package(str(package_name))
        except ClientError as error:
            raise validation(f"ModelPackage {package_name} does not exist ({error})", operation) from None
        if package.get("ModelPackageVersion") and package.get("ModelApprovalStatus") != "Approved":
            arn, status = package["ModelPackageArn"], package.get("ModelApprovalStatus")
            raise validation(
                f"Model package {arn} is {status}: a versioned model package must be Approved to be deployed "
                f"(aws sagemaker update-model-package --model-package-arn {arn} "
                "--model-approval-status Approved)",
                operation,
            )
        specification = package.get("InferenceSpecification")
        if not specification:
            raise validation(
                f"Model package {package['ModelPackageArn']} has no InferenceSpecification", operation
            )
        [container] = specification["Containers"][:1]
        environment = {**(container.get("Environment") or {}), **(given.get("Environment") or {})}
        return {
            "Image": container["Image"],
            "ModelDataUrl": container.get("ModelDataUrl"),
            "Environment": environment,
        }

    def describe_model(self, **request: Any) -> dict[str, Any]:
        operation = "DescribeModel"
        listing.check_request(operation, request)
        model = self._model(str(request["ModelName"]), operation)
        return {k: v for k, v in model.items() if k != "resolved"}

    def delete_model(self, **request: Any) -> dict[str, Any]:
        operation = "DeleteModel"
        listing.check_request(operation, request)
        name = str(request["ModelName"])
        with self._lock:
            self._model(name, operation)
            del self.models[name]
        return {}

    def _model(self, name: str, operation: str) -> dict[str, Any]:
        model = self.models.get(name)
        if model is None:
            raise validation(f'Could not find model "{self._arn("model", name)}".', operation)
        return model

    # -- endpoint configurations ---------------------------------------------------------------------

    def create_endpoint_config(self, **request: Any) -> dict[str, Any]:
        operation = "CreateEndpointConfig"
        listing.check_request(operation, request)
        name = str(request["EndpointConfigName"])
        variants = list(request["ProductionVariants"])
        if len(variants) != 1:
            raise validation("the embedded stack hosts one production variant per endpoint", operation)
        variant = variants[0]
        if variant.get("ServerlessConfig") or not variant.get("InstanceType"):
            raise validation("the embedded stack hosts instance-based variants: give InstanceType", operation)
        with self._lock:
            self._model(str(variant.get("ModelName", "")), operation)
            arn = self._arn("endpoint-config", name)
            if name in self.configs:
                raise validation(f'Cannot create already existing endpoint configuration "{arn}".', operation)
            self.configs[name] = {
                "EndpointConfigName": name,
                "EndpointConfigArn": arn,
                "ProductionVariants": [dict(v) for v in variants],
                "CreationTime": _now(),
            }
        return {"EndpointConfigArn": arn}

    def describe_endpoint_config(self, **request: Any) -> dict[str, Any]:
        operation = "DescribeEndpointConfig"
        listing.check_request(operation, request)
        return dict(self._config(str(request["EndpointConfigName"]), operation))

    def delete_endpoint_config(self, **request: Any) -> dict[str, Any]:
        operation = "DeleteEndpointConfig"
        listing.check_request(operation, request)
        name = str(request["EndpointConfigName"])
        with self._lock:
            self._config(name, operation)
            del self.configs[name]
        return {}

    def _config(self, name: str, operation: str) -> dict[str, Any]:
        config = self.configs.get(name)
        if config is None:
            arn = self._arn("endpoint-config", name)
            raise validation(f'Could not find endpoint configuration "{arn}".', operation)
        return config

    # -- endpoints -----------------------------------------------------------------------------------

    def create_endpoint(self, **request: Any) -> dict[str, Any]:
        operation = "CreateEndpoint"
        listing.check_request(operation, request)
        name = str(request["EndpointName"])
        with self._lock:
            config = self._config(str(request["EndpointConfigName"]), operation)
            arn = self._arn("endpoint", name)
            if name in self.endpoints:
                raise validation(f'Cannot create already existing endpoint "{arn}".', operation)
            [variant] = config["ProductionVariants"]
            model = self._model(str(variant["ModelName"]), operation)
            endpoint = Endpoint(
                name=name,
                arn=arn,
                config_name=config["EndpointConfigName"],
                created=_now(),
                image=str(model["resolved"]["Image"]),
                variant=str(variant["VariantName"]),
                instance_type=str(variant["InstanceType"]),
            )
            self.endpoints[name] = endpoint
        thread = threading.Thread(
            target=self._deploy, args=(endpoint, model), name=f"endpoint-{name}", daemon=True
        )
        self._threads.append(thread)
        thread.start()
        return {"EndpointArn": arn}

    def describe_endpoint(self, **request: Any) -> dict[str, Any]:
        operation = "DescribeEndpoint"
        listing.check_request(operation, request)
        with self._lock:
            endpoint = self._endpoint(str(request["EndpointName"]), operation)
            return self._description(endpoint)

    def _description(self, endpoint: Endpoint) -> dict[str, Any]:
        described: dict[str, Any] = {
            "EndpointName": endpoint.name,
            "EndpointArn": endpoint.arn,
            "EndpointConfigName": endpoint.config_name,
            "EndpointStatus": endpoint.status,
            "CreationTime": endpoint.created,
            "LastModifiedTime": endpoint.modified,
        }
        if endpoint.status == "InService":
            described["ProductionVariants"] = [
                {
                    "VariantName": endpoint.variant,
                    "DeployedImages": [{"SpecifiedImage": endpoint.image, "ResolvedImage": endpoint.image}],
                    "CurrentWeight": 1.0,
                    "DesiredWeight": 1.0,
                    "CurrentInstanceCount": 1,
                    "DesiredInstanceCount": 1,
                }
            ]
        if endpoint.failure:
            described["FailureReason"] = endpoint.failure
        return described

    def list_endpoints(self, **request: Any) -> dict[str, Any]:
        operation = "ListEndpoints"
        listing.check_request(operation, request)
        times = listing.TimeFilters.of(request)
        with self._lock:
            summaries = [
                {
                    k: v
                    for k, v in self._description(e).items()
                    if k not in ("ProductionVariants", "FailureReason")
                }
                for e in self.endpoints.values()
            ]
        kept = [
            s
            for s in summaries
            if str(request.get("NameContains") or "") in s["EndpointName"]
            and request.get("StatusEquals") in (None, s["EndpointStatus"])
            and times.keep(listing.epoch(s["CreationTime"]), listing.epoch(s["LastModifiedTime"]))
        ]
        for summary in kept:
            summary.pop("EndpointConfigName", None)
        ordered = listing.sort(
            kept,
            request,
            {
                "Name": lambda s: s["EndpointName"],
                "CreationTime": lambda s: listing.epoch(s["CreationTime"]),
                "Status": lambda s: s["EndpointStatus"],
            },
            "CreationTime",
            tie=lambda s: s["EndpointName"],
        )
        return listing.page(ordered, "Endpoints", request, operation)

    def delete_endpoint(self, **request: Any) -> dict[str, Any]:
        operation = "DeleteEndpoint"
        listing.check_request(operation, request)
        with self._lock:
            endpoint = self._endpoint(str(request["EndpointName"]), operation)
            endpoint.deleted = True
            del self.endpoints[endpoint.name]
        self._stop(endpoint)
        return {}

    def _endpoint(self, name: str, operation: str) -> Endpoint:
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            raise validation(f'Could not find endpoint "{self._arn("endpoint", name)}".', operation)
        return endpoint

    def close(self) -> None:
        """Stop every endpoint's container (the stack stops)."""
        with self._lock:
            endpoints = list(self.endpoints.values())
            for endpoint in endpoints:
                endpoint.deleted = True
            self.endpoints.clear()
        for endpoint in endpoints:
            self._stop(endpoint)
        for thread in self._threads:
            thread.join(timeout=STARTUP_TIMEOUT_SECONDS)

    # -- deployment ----------------------------------------------------------------------------------

    def serving_image(self) -> ContainerImage:
        """The interpreter standing in for the PyTorch inference image's Python (built once)."""
        if self._image is None:
            interpreter = image_environment(SERVING_REQUIREMENTS, IMAGE_ENVIRONMENTS)
            root = self.workdir / "serving-image"
            root.mkdir(parents=True, exist_ok=True)
            self._image = ContainerImage(
                root=root,
                interpreter=interpreter,
                environment=(interpreter.parent.parent, Path(sys.prefix)),
            )
        return self._image

    def _deploy(self, endpoint: Endpoint, model: dict[str, Any]) -> None:
        try:
            self._start(endpoint, model)
        except Exception as error:  # the endpoint fails with the reason; the API thread stays up
            self._set(endpoint, "Failed", failure=" ".join(str(error).split())[:1024])
            self._stop(endpoint)

    def _start(self, endpoint: Endpoint, model: dict[str, Any]) -> None:
        resolved = model["resolved"]
        directory = self.workdir / "endpoints" / endpoint.name
        endpoint.directory = directory
        opt_ml = directory / "opt" / "ml"
        model_dir = opt_ml / "model"
        model_dir.mkdir(parents=True, exist_ok=True)
        context = self.context.as_role(str(model["ExecutionRoleArn"]), str(resolved["Image"]))
        if resolved.get("ModelDataUrl"):
            _extract(context, str(resolved["ModelDataUrl"]), model_dir)
        image = self.serving_image()
        endpoint.port = _free_port()
        environment = {
            "AWS_REGION": self.region,
            "SAGEMAKER_BIND_TO_PORT": str(endpoint.port),
            **(resolved.get("Environment") or {}),
        }
        spec = ContainerSpec(
            argv=[str(image.interpreter), str(TOOLKIT), contract.PROGRAM_ENV],
            env=container_environment(image, environment),
            opt_ml=opt_ml,
            network_isolation=False,  # the emulator reaches /ping and /invocations on this machine's loopback
            hosts=(CONTAINER_HOST,),
            copy_on_write=image.environment,
        )
        if endpoint.deleted:
            return
        endpoint.container = Container(spec, directory / "container")
        log = directory / "container.log"
        threading.Thread(target=_drain, args=(endpoint.container, log), daemon=True).start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
        while not endpoint.deleted:
            if endpoint.container.poll() is not None:
                raise RuntimeError(
                    f"The primary container for production variant {endpoint.variant} did not pass the ping "
                    f"health check: it exited with {endpoint.container.returncode}: {_last_line(log)}"
                )
            if _ping(endpoint.port):
                self._set(endpoint, "InService")
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"The primary container for production variant {endpoint.variant} did not pass the ping "
                    f"health check within {STARTUP_TIMEOUT_SECONDS:.0f} s: {_last_line(log)}"
                )
            time.sleep(PING_INTERVAL_SECONDS)

    def _set(self, endpoint: Endpoint, status: str, *, failure: str = "") -> None:
        with self._lock:
            endpoint.status, endpoint.modified = status, _now()
            if failure:
                endpoint.failure = failure

    def _stop(self, endpoint: Endpoint) -> None:
        container = endpoint.container
        if container is not None:
            container.stop(STOP_GRACE_SECONDS)
            container.cleanup()

    # -- invocations ---------------------------------------------------------------------------------

    def invoke_endpoint(self, **request: Any) -> Invocation:
        """InvokeEndpoint: the container's answer, or the error SageMaker Runtime answers with."""
        name = str(request.get("EndpointName", ""))
        with self._lock:
            endpoint = self.endpoints.get(name)
        if endpoint is None:
            return _runtime_error(
                400, "ValidationError", f"Endpoint {name} of account {self.account_id} not found."
            )
        if endpoint.status != "InService":
            return _runtime_error(
                400,
                "ValidationError",
                f"Endpoint {name} of account {self.account_id} is {endpoint.status}, not InService.",
            )
        headers = {"Content-Type": str(request.get("ContentType") or "application/octet-stream")}
        if request.get("Accept"):
            headers["Accept"] = str(request["Accept"])
        connection = http.client.HTTPConnection(
            "127.0.0.1", endpoint.port, timeout=INVOCATION_TIMEOUT_SECONDS
        )
        try:
            connection.request(
                "POST", "/invocations", body=bytes(request.get("Body") or b""), headers=headers
            )
            response = connection.getresponse()
            body, status = response.read(), response.status
            content_type = response.getheader("Content-Type") or "application/octet-stream"
        except (OSError, http.client.HTTPException) as error:
            return _runtime_error(
                MODEL_ERROR_STATUS, "ModelError", f"Received server error from {CONTAINER_HOST}: {error}"
            )
        finally:
            connection.close()
        if 200 <= status < 300:
            return Invocation(
                200,
                {"Content-Type": content_type, "x-Amzn-Invoked-Production-Variant": endpoint.variant},
                body,
            )
        original = body.decode("utf-8", "replace")
        kind = "client" if status < 500 else "server"
        group = f"/aws/sagemaker/Endpoints/{name}"
        console = f"https://{self.region}.console.aws.amazon.com/cloudwatch/home?region={self.region}"
        message = (
            f'Received {kind} error ({status}) from {CONTAINER_HOST} with message "{original}". See '
            f"{console}#logEventViewer:group={group} in account {self.account_id} for more information."
        )
        logs = f"arn:aws:logs:{self.region}:{self.account_id}:log-group:{group}"
        stream = f"{logs}:log-stream:{endpoint.variant}/i-1"
        return _runtime_error(
            MODEL_ERROR_STATUS,
            "ModelError",
            message,
            OriginalStatusCode=status,
            OriginalMessage=original,
            LogStreamArn=stream,
        )


def _runtime_error(status: int, code: str, message: str, **fields: Any) -> Invocation:
    """A SageMaker Runtime error in its rest-json shape (the modelled fields beside the message)."""
    body = json.dumps({"__type": code, "message": message, **fields}).encode()
    return Invocation(status, {"Content-Type": "application/json", "x-amzn-ErrorType": code}, body)


def _extract(context: JobContext, uri: str, into: Path) -> None:
    """The model data, as SageMaker lays it out under /opt/ml/model (a .tar.gz is unpacked)."""
    location = S3Uri.parse(uri)
    body = context.s3.get_object(Bucket=location.bucket, Key=location.key)["Body"].read()
    if not location.key.endswith(".tar.gz"):
        (into / Path(location.key).name).write_bytes(body)
        return
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as archive:
        archive.extractall(into, filter="data")


def _ping(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request("GET", "/ping")
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def _drain(container: Container, log: Path) -> None:
    """The container's output into its log (and the pipe never fills)."""
    stream = container.process.stdout
    if stream is None:
        return
    with log.open("a", encoding="utf-8") as out, contextlib.suppress(ValueError, OSError):
        for line in stream:
            out.write(line)
            out.flush()


def _last_line(log: Path) -> str:
    for _ in range(20):  # the drain thread may still be writing the container's last words
        lines = (
            [line for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
            if log.exists()
            else []
        )
        if lines:
            return lines[-1]
        time.sleep(0.05)
    return "no output"
