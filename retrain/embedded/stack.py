"""The embedded stack's lifetime: a moto server on 127.0.0.1 with the runtime around it, from template.yaml.

``EmbeddedStack`` starts the server (``AWS_ENDPOINT_URL`` for everything: the CLI, the Lambda processes,
the training jobs) behind the gatekeeper (every request held against its API contract and its role's
IAM policies, :mod:`retrain.embedded.gatekeeper.iam`), installs the integrations moto lacks, provisions the
template as a CloudFormation stack (its parameters and Rules checked first), wires the Lambda runtime
(each function runs from ``sam build``'s output of its CodeUri and layers, on the template's runtime:
:mod:`retrain.embedded.provisioning.build`), the SQS pollers and the scheduler (each signing as its
function's role), and restores the data saved by the previous stop. ``stop()`` saves the data again
(``snapshot``), so runs, reports and warm starts outlive the process. :mod:`retrain.embedded.background`
runs the same stack as a background process for ``retrain local up|down``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import socket
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import boto3
from botocore.config import Config

from retrain.dev import base_image
from retrain.embedded import cfn_types, s3_versions, servicequotas, snapshot
from retrain.embedded.account import ACCOUNT_ID, REGION
from retrain.embedded.awslambda.interpreters import RuntimeUnavailableError
from retrain.embedded.awslambda.runtime import LambdaRuntime
from retrain.embedded.dynamodb import item_size, query_sort
from retrain.embedded.events import s3_notices, sqs_locks, sqs_speed
from retrain.embedded.events.sagemaker_jobs import JobEvents
from retrain.embedded.events.scheduler import Scheduler
from retrain.embedded.events.sqs_poller import INITIAL_CONCURRENT_BATCHES, SqsPoller
from retrain.embedded.faults import FaultingSageMaker, Faults
from retrain.embedded.fsx.api import install_api
from retrain.embedded.fsx.emulator import FsxEmulator
from retrain.embedded.gatekeeper.gate import Gatekeeper, RequestRefusedError
from retrain.embedded.gatekeeper.iam.actions import LOG_DELIVERY_ACTIONS, Access
from retrain.embedded.gatekeeper.iam.evaluator import PolicyEvaluator
from retrain.embedded.gatekeeper.iam.principals import Principals
from retrain.embedded.mlflow_app import ENDPOINT_VARIABLE, MlflowApp
from retrain.embedded.provisioning.build import DEFAULT_BUILD_ROOT, build_functions
from retrain.embedded.provisioning.external import (
    ExternalCreators,
    create_external,
    deterministic_names,
    moto_supported_types,
)
from retrain.embedded.provisioning.intrinsics import without_no_value
from retrain.embedded.provisioning.moto_backends import detach_moto_sqs_delivery, register_state_machines
from retrain.embedded.provisioning.parameters import check_parameters, check_rules, stack_parameters
from retrain.embedded.provisioning.sam import (
    DEPLOY_BUCKET,
    ProvisioningError,
    load_template,
    package,
    translate,
)
from retrain.embedded.provisioning.wiring import Wiring, apply_notifications, unwired, wire
from retrain.embedded.s3files import InputCache
from retrain.embedded.server import gated_moto_server
from retrain.embedded.stepfunctions import integrations

LOG = logging.getLogger(__name__)
REPO_ROOT: Final = Path(__file__).resolve().parents[2]
DEFAULT_STATE_DIR: Final = Path(".retrain")
DEFAULT_STACK_NAME: Final = "retrain"
LOCAL_KEY: Final = "retrain-local"
# The access key the lazy restore signs with: its own requests must not wait for it.
RESTORE_KEY: Final = "retrain-restore"
_ECR_IMAGE: Final = re.compile(
    r"^(?P<registry>[0-9]{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?/(?P<repository>[^:@]+)"
)


def _timed(step: str, stop: Callable[[], object]) -> None:
    """One step of stopping the stack, with what it took in the log."""
    began = time.monotonic()
    stop()
    LOG.info("stopping: %s took %.1f s", step, time.monotonic() - began)


class EmbeddedStackError(RuntimeError):
    """The embedded stack could not start or stop; the message says why and what to do."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedStack:
    """The whole emulated AWS side of retrain, for one process (foreground) or as ``up``'s server."""

    # Invocations of one function this machine runs at once (set before start): Lambda's own ceiling is
    # the account's, and an event source mapping's MaximumConcurrency applies within it.
    function_concurrency = 2

    def __init__(
        self,
        state_dir: Path = DEFAULT_STATE_DIR,
        *,
        parameter_overrides: dict[str, str] | None = None,
        faults: Faults | None = None,
        spot: Any = None,
        template: Path = REPO_ROOT / "template.yaml",
        stack_name: str = DEFAULT_STACK_NAME,
        time_scale: float = 0.2,
        port: int = 0,
    ) -> None:
        self.state_dir = Path(state_dir).resolve()
        # Where the functions' `sam build` output is kept, by content (shared by every stack).
        self.build_root = DEFAULT_BUILD_ROOT
        self.parameter_overrides = dict(parameter_overrides or {})
        self.faults = faults if faults is not None else Faults()
        self.spot = spot
        self.template = template
        self.stack_name = stack_name
        self.time_scale = time_scale
        self.port = port or _free_port()
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        self._exit = contextlib.ExitStack()
        self._server: Any = None
        self.runtime: LambdaRuntime | None = None
        self.fsx: FsxEmulator | None = None
        self.sagemaker: Any = None
        self.job_events: JobEvents | None = None
        self.wiring: Wiring | None = None
        self.translated: dict[str, Any] = {}
        self._pollers: list[SqsPoller] = []
        self.degraded: list[str] = []
        self._scheduler: Scheduler | None = None
        self.mlflow_app: MlflowApp | None = None
        # The emulated account's applied quotas (Service Quotas, Lambda's GetAccountSettings): AWS's defaults
        # unless a test or a user applies a value.
        self.quotas = servicequotas.AccountQuotas()
        self._session = boto3.session.Session(
            aws_access_key_id=LOCAL_KEY, aws_secret_access_key=LOCAL_KEY, region_name=REGION
        )
        # Every request is held against the API's contract and (for the stack's roles) IAM: always on.
        self.gatekeeper = Gatekeeper(
            Principals(), PolicyEvaluator(account=ACCOUNT_ID), region=REGION, account=ACCOUNT_ID
        )
        self._role_clients: dict[str, tuple[Any, Any]] = {}
        self._dlc_accounts: frozenset[str] | None = None  # the template's serving-image registries
        self._events_client: Any = None
        # Set by start(read_only=True) until the saved objects are back in the buckets.
        self._objects_pending = False
        self._restore_lock = threading.Lock()

    def client(self, service: str, *, role_arn: str | None = None) -> Any:
        """A client on the stack's endpoint: the operator's, or signed as one of the stack's roles."""
        session = self._session
        if role_arn is not None:
            key, secret = self.gatekeeper.credentials(role_arn)
            session = boto3.session.Session(
                aws_access_key_id=key, aws_secret_access_key=secret, region_name=REGION
            )
        return session.client(  # type: ignore[call-overload]
            service, endpoint_url=self.endpoint_url, config=Config(max_pool_connections=32)
        )

    def _report_execution_end(self, entry: dict[str, Any]) -> None:
        """Step Functions tells EventBridge that an execution ended (the execution-ended rule listens)."""
        if self._events_client is None:
            self._events_client = self.client("events")
        self._events_client.put_events(Entries=[entry])

    def _role_session(self, role_arn: str, image: str) -> tuple[Any, Any]:
        """What a SageMaker job of `role_arn` reads and writes with; its image pull is authorised first."""
        principal = self.gatekeeper.principals.role(role_arn)
        pull = _ECR_IMAGE.match(image)
        if pull:
            repository = f"arn:aws:ecr:{pull['region']}:{pull['registry']}:repository/{pull['repository']}"
            # AWS's Deep Learning Containers (a package's serving image) live in AWS's registry accounts,
            # whose repository policy lets any account pull; any other account's image has none here.
            if self._dlc_accounts is None:
                self._dlc_accounts = base_image.mapped_accounts(load_template(self.template))
            aws_image = pull["registry"] in self._dlc_accounts
            try:
                self.gatekeeper.authorize(
                    principal,
                    [
                        Access("ecr:GetAuthorizationToken", "*"),
                        Access("ecr:BatchGetImage", repository),
                        Access("ecr:GetDownloadUrlForLayer", repository),
                    ],
                    service="ecr",
                    resource_policy=base_image.DLC_REPOSITORY_POLICY if aws_image else None,
                )
            except RequestRefusedError as refused:
                raise RuntimeError(f"pulling {image}: {refused.code}: {refused.message}") from None
        if role_arn not in self._role_clients:
            self._role_clients[role_arn] = (
                self.client("s3", role_arn=role_arn),
                self.client("logs", role_arn=role_arn),
            )
        return self._role_clients[role_arn]

    def _role_environment(self, role_arn: str) -> dict[str, str]:
        """A job's process calls AWS as its execution role, through the gated endpoint."""
        key, secret = self.gatekeeper.credentials(role_arn)
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": key,
            "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_DEFAULT_REGION": REGION,
        }

    # -- lifetime
    def start(self, *, read_only: bool = False) -> str:
        """Start everything; the endpoint URL to give boto3 (AWS_ENDPOINT_URL).

        ``read_only`` starts a stack for a command that only reads (``retrain runs``, ``status``,
        ``report``): the saved objects go back into the buckets on the first S3 request (by anyone but the
        restore itself) rather than now, so a command that reads the tables alone never waits for them,
        and nothing that acts is started: no queue pollers or schedules, no job events, no state machines
        registered with the interpreter (executions do not outlive a stack). The tables and logs are
        restored before this returns either way."""
        if not self.template.exists():
            raise EmbeddedStackError(f"no template at {self.template}: run retrain from the repository root")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._start(read_only)
        except BaseException:
            self.stop(save=False)
            raise
        return self.endpoint_url

    def _start(self, read_only: bool) -> None:
        from moto.core.config import default_user_config

        # The ASL interpreter calls back into this server at localhost:MOTO_PORT.
        os.environ["MOTO_PORT"] = str(self.port)
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        # Job threads share the stack's clients; past the pool's size urllib3 drops a spare connection
        # after use and warns ("Connection pool is full"): no request is lost, so the demo stays quiet.
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
        default_user_config["stepfunctions"] = {"execute_state_machine": True}
        self._server = gated_moto_server(
            self.gatekeeper, ip_address="127.0.0.1", port=self.port, before=self._before_request
        )

        s3 = self.client("s3")
        s3.create_bucket(Bucket=DEPLOY_BUCKET)
        self.faults.save(self.state_dir / "faults.json")
        self.fsx = FsxEmulator(
            self.state_dir / "fsx", s3_client=s3, faults=self.faults, region=REGION, account=ACCOUNT_ID
        )
        self.sagemaker = self._sagemaker(s3)
        self.runtime = LambdaRuntime(
            {},
            endpoint_url=self.endpoint_url,
            log_dir=self.state_dir / "logs" / "lambda",
            max_concurrency=self.function_concurrency,
            credentials=self.gatekeeper.credentials,
        )
        job_events = self.job_events = JobEvents(self.sagemaker, self.client("events"))
        # What Step Functions and boto3 reach: state-change events published, the fault knobs applied.
        service = FaultingSageMaker(job_events, self.faults)
        self._exit.enter_context(
            integrations.installed(
                lambda_invoker=self.runtime.invoke,
                sagemaker=service,
                fsx=self.fsx,
                gate=self.gatekeeper,
                on_execution_end=self._report_execution_end,
                redelivery=self.faults.redelivery_delay if self.faults.duplicate_events else None,
            )
        )
        self._exit.enter_context(install_api(self.fsx))
        self._exit.enter_context(servicequotas.installed(self.quotas))
        self._exit.enter_context(cfn_types.installed())
        self._exit.enter_context(s3_notices.installed())
        self._exit.enter_context(s3_versions.installed())
        self._exit.enter_context(sqs_speed.installed())
        self._exit.enter_context(sqs_locks.installed())
        self._exit.enter_context(item_size.installed())
        self._exit.enter_context(query_sort.installed())
        from retrain.embedded.sagemaker import api_installed

        try:
            self._exit.enter_context(api_installed(service))
        except (RuntimeError, TypeError) as error:
            # Task states still reach the emulator directly; only boto3's SageMaker calls lose it.
            LOG.warning("SageMaker HTTP API not routed to the emulator: %s", error)
            self.degraded.append(f"sagemaker-http-api: {error}")
        self._provision(s3, register=not read_only)
        saved = self.state_dir / "snapshot"
        snapshot.restore_records(
            saved, dynamodb_client=self.client("dynamodb"), logs_client=self.client("logs")
        )
        if read_only and snapshot.has_objects(saved):
            self._objects_pending = True
        else:
            self._restore_objects(s3)
        if not read_only:
            self._start_event_sources()
            job_events.start()

    def _restore_objects(self, s3: Any) -> None:
        """The saved objects back into the buckets, then the buckets' notifications (the objects put back
        are no new uploads)."""
        assert self.wiring is not None
        snapshot.restore_buckets(self.state_dir / "snapshot", s3_client=s3)
        apply_notifications(self.wiring, s3)

    def _before_request(self, access_key: str, service: str) -> None:
        """Every signed request, before it is served: the first S3 one waits for the lazy restore."""
        if not self._objects_pending or service != "s3" or access_key == RESTORE_KEY:
            return
        with self._restore_lock:
            if self._objects_pending:
                began = time.monotonic()
                self._restore_objects(self._restore_client())
                self._objects_pending = False
                LOG.info("restored the saved objects in %.1f s", time.monotonic() - began)

    def _restore_client(self) -> Any:
        session = boto3.session.Session(
            aws_access_key_id=RESTORE_KEY, aws_secret_access_key=RESTORE_KEY, region_name=REGION
        )
        return session.client("s3", endpoint_url=self.endpoint_url, config=Config(max_pool_connections=32))

    def _sagemaker(self, s3: Any) -> Any:
        from retrain.embedded.sagemaker import JobContext, SageMakerEmulator, SpotSchedule
        from retrain.embedded.sagemaker.slots import NewestFirstSlots

        assert self.fsx is not None
        context = JobContext(
            s3=s3,
            logs=self.client("logs"),
            fsx_root=self.fsx.mount_path,
            faults=self.faults,
            spot=self.spot if self.spot is not None else SpotSchedule(),
            role_session=self._role_session,
            role_environment=self._role_environment,
            keep_instance_files=False,
            input_cache=InputCache(self.state_dir / "sagemaker" / "input-cache"),
            processing_slots=NewestFirstSlots(os.cpu_count() or 1),
        )
        return SageMakerEmulator(self.state_dir / "sagemaker", context, region=REGION)

    def _provision(self, s3: Any, *, register: bool = True) -> None:
        """template.yaml into moto and the runtime; with ``register``, its state machines into the ASL
        interpreter too (what starting executions needs)."""
        assert self.fsx is not None and self.runtime is not None
        template = load_template(self.template)
        try:
            parameters = stack_parameters(
                template,
                self.parameter_overrides,
                fault_overrides=self.faults.parameter_overrides(),
                template_name=self.template.name,
                region=REGION,
            )
        except ProvisioningError as error:
            raise EmbeddedStackError(str(error)) from None
        try:
            check_parameters(template, parameters)
            check_rules(template, parameters, region=REGION, stack_name=self.stack_name)
        except ProvisioningError as error:
            raise EmbeddedStackError(f"stack {self.stack_name} refused at creation: {error}") from None
        try:
            builds = build_functions(template, self.template.parent, root=self.build_root)
        except (ProvisioningError, RuntimeUnavailableError) as error:
            raise EmbeddedStackError(f"building the Lambda functions of {self.template}: {error}") from None
        packaged = package(template, self.template.parent, s3)
        # moto's CloudFormation keeps AWS::NoValue as a null: leave those out first, as AWS does
        self.translated = without_no_value(translate(packaged, parameters, REGION), parameters, region=REGION)
        creators = ExternalCreators(
            self.fsx, self.sagemaker, stack_name=self.stack_name, mlflow_app=self._create_mlflow_app
        )
        body, external = create_external(
            self.translated,
            creators.by_type(),
            moto_supported_types(),
            stack_name=self.stack_name,
            parameters=parameters,
            region=REGION,
        )
        cfn = self.client("cloudformation")
        with deterministic_names():
            cfn.create_stack(
                StackName=self.stack_name,
                TemplateBody=json.dumps(body),
                Parameters=[
                    {"ParameterKey": k, "ParameterValue": v}
                    for k, v in parameters.items()
                    if k in body.get("Parameters", {})
                ],
                Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
            )
        status = cfn.describe_stacks(StackName=self.stack_name)["Stacks"][0]
        if status["StackStatus"] != "CREATE_COMPLETE":
            raise EmbeddedStackError(
                f"stack {self.stack_name}: {status['StackStatus']} {status.get('StackStatusReason')}"
            )
        resources = cfn.describe_stack_resources(StackName=self.stack_name)["StackResources"]
        physical = {
            r["LogicalResourceId"]: r["PhysicalResourceId"] for r in resources if r.get("PhysicalResourceId")
        }
        LOG.debug("stack resources: %s", resources)
        self.gatekeeper.principals.load_stack_roles(body, physical, account=ACCOUNT_ID, region=REGION)
        self._check_state_machine_logging(body, physical)
        if register:
            register_state_machines(
                [
                    physical[k]
                    for k, r in body["Resources"].items()
                    if r["Type"] == "AWS::StepFunctions::StateMachine" and k in physical
                ]
            )
        detach_moto_sqs_delivery()
        self.wiring = wire(
            body,
            builds,
            physical=physical,
            lambda_client=self.client("lambda"),
            sqs_client=self.client("sqs"),
            events_client=self.client("events"),
            s3_client=s3,
            parameters=parameters,
        )
        self.wiring.external = external
        self.runtime.functions = dict(self.wiring.functions)
        missing = unwired(body, self.wiring)
        if missing:
            raise EmbeddedStackError(f"the embedded runtime did not wire: {', '.join(missing)}")

    def _create_mlflow_app(self, logical_id: str, props: dict[str, Any]) -> tuple[str, dict[str, str]]:
        """The template's AWS::SageMaker::MlflowApp: a gated MLflow server whose store is the state
        directory's (one app per stack; its id is the stack's, so its ARN survives restarts)."""
        assert self.runtime is not None
        if self.mlflow_app is not None:
            raise EmbeddedStackError(f"{logical_id}: the embedded stack hosts one MLflow app per stack")
        app_id = "app-" + hashlib.sha256(f"{self.stack_name}/{logical_id}".encode()).hexdigest()[:12]
        arn = f"arn:aws:sagemaker:{REGION}:{ACCOUNT_ID}:mlflow-app/{app_id}"
        role_arn = str(props["RoleArn"])
        self.mlflow_app = MlflowApp(
            name=str(props.get("Name") or app_id),
            arn=arn,
            artifact_store_uri=str(props["ArtifactStoreUri"]),
            state_dir=self.state_dir,
            gatekeeper=self.gatekeeper,
            server_environment=lambda: self._role_environment(role_arn),
        )
        self.runtime.redirects[ENDPOINT_VARIABLE] = self.mlflow_app.start()
        return arn, {"Arn": arn, "MlflowAppId": app_id}

    def _check_state_machine_logging(self, body: dict[str, Any], physical: dict[str, str]) -> None:
        """CreateStateMachine refuses a Logging configuration its role cannot deliver logs with."""
        from moto.stepfunctions.models import stepfunctions_backends

        for logical_id, resource in body["Resources"].items():
            props = resource.get("Properties", {})
            if resource["Type"] != "AWS::StepFunctions::StateMachine" or logical_id not in physical:
                continue
            if not (props.get("LoggingConfiguration") or {}).get("Destinations"):
                continue
            role = (
                stepfunctions_backends[ACCOUNT_ID][REGION]
                .describe_state_machine(physical[logical_id])
                .roleArn
            )
            try:
                self.gatekeeper.authorize(
                    self.gatekeeper.principals.role(role),
                    [Access(action, "*") for action in LOG_DELIVERY_ACTIONS],
                    service="stepfunctions",
                )
            except RequestRefusedError as refused:
                raise EmbeddedStackError(
                    f"stack {self.stack_name}: CREATE_FAILED {logical_id}: InvalidLoggingConfiguration: "
                    f"the state machine's role cannot deliver its logs ({refused.message})"
                ) from None

    def _start_event_sources(self) -> None:
        assert self.wiring is not None and self.runtime is not None
        sqs = self.client("sqs")
        for mapping in self.wiring.sqs_mappings:
            if mapping.enabled:
                # Lambda reads the queue with the function's execution role.
                role = self.runtime.resolve(mapping.function).role_arn or None
                poller = SqsPoller(
                    mapping,
                    sqs_client=self.client("sqs", role_arn=role),
                    control_client=sqs,
                    invoke=self.runtime.invoke,
                    region=REGION,
                    time_scale=self.time_scale,
                    # as many batches at once as Lambda starts with, within the mapping's maximum and
                    # the functions this machine runs at once
                    concurrency=min(
                        mapping.maximum_concurrency or INITIAL_CONCURRENT_BATCHES,
                        self.runtime.max_concurrency,
                    ),
                )
                poller.start()
                self._pollers.append(poller)
        self._scheduler = Scheduler(
            self.wiring.scheduled_rules,
            invoke=self.runtime.invoke,
            sqs_client=sqs,
            account=ACCOUNT_ID,
            region=REGION,
            time_scale=self.time_scale,
        )
        self._scheduler.start()

    def stop(self, *, save: bool = True) -> None:
        """Stop everything; with ``save`` the stack's data goes to the state directory first.

        Every step runs even when an earlier one fails, so the process-wide patches and the server are
        always released (a later stack in this process must be able to start); the first error is raised.
        """
        began = time.monotonic()
        LOG.info("stopping the embedded stack %s", self.stack_name)
        with contextlib.ExitStack() as steps:
            # ExitStack runs these last-pushed-first: server, patches, runtime, save, then the workers.
            steps.callback(_timed, "gatekeeper", self.gatekeeper.evaluator.close)
            steps.callback(_timed, "server", self._stop_server)
            if self.mlflow_app is not None:
                steps.callback(_timed, "MLflow app", self.mlflow_app.stop)
            steps.callback(_timed, "patches", self._exit.close)
            if self.runtime is not None:
                steps.callback(_timed, "Lambda runtime", self.runtime.close)
            if save and self.wiring is not None:
                steps.callback(_timed, "save", self._save_logged)
            if self.fsx is not None:
                steps.callback(_timed, "FSx tasks", self.fsx.wait)
            if self.job_events is not None:
                steps.callback(_timed, "job events", self.job_events.stop)
            if self.sagemaker is not None:
                steps.callback(_timed, "SageMaker", self.sagemaker.close)
            if self._scheduler is not None:
                steps.callback(_timed, "scheduler", self._scheduler.stop)
            for poller in self._pollers:
                steps.callback(_timed, "SQS poller", poller.stop)
            self._pollers.clear()
        LOG.info("embedded stack %s stopped in %.1f s", self.stack_name, time.monotonic() - began)

    def _save_logged(self) -> None:
        try:
            self._save()
        except Exception:
            LOG.exception("saving the embedded stack's data to %s failed", self.state_dir)

    def _stop_server(self) -> None:
        if self._server is None:
            return
        # moto's backends are process-wide: empty them, so a later stack in this process starts from
        # the saved state alone, as a new process would.
        with contextlib.suppress(OSError):
            request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
            urllib.request.urlopen(request, timeout=30).close()
        self._server.stop()
        self._server = None

    def _dropped_from_snapshot(self) -> dict[str, list[str]]:
        """bucket -> key prefixes whose only reader is gone: ended training jobs' checkpoints and the
        checkpoint copies ended evaluations read."""
        if self.sagemaker is None:
            return {}
        dropped: dict[str, list[str]] = {}
        for found in (self.sagemaker.ended_checkpoint_prefixes(), self.sagemaker.ended_checkpoint_inputs()):
            for bucket, prefixes in found.items():
                dropped.setdefault(bucket, []).extend(prefixes)
        return dropped

    def _save(self) -> None:
        assert self.wiring is not None
        # Never save buckets that a lazy restore has not filled yet.
        self._before_request(LOCAL_KEY, "s3")
        cfn = self.client("cloudformation")
        resources = cfn.describe_stack_resources(StackName=self.stack_name)["StackResources"]
        buckets = [r["PhysicalResourceId"] for r in resources if r["ResourceType"] == "AWS::S3::Bucket"]
        snapshot.save(
            self.state_dir / "snapshot",
            s3_client=self.client("s3"),
            dynamodb_client=self.client("dynamodb"),
            logs_client=self.client("logs"),
            buckets=buckets,
            tables=list(self.wiring.tables.values()),
            pruning=snapshot.Pruning(
                current_only=True,
                dropped=self._dropped_from_snapshot(),
            ),
        )

    def __enter__(self) -> EmbeddedStack:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
