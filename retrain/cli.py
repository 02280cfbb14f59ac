"""The `retrain` command line: demo, upload, start, status, runs, report, predict, preflight, local up|down.

Every command talks to one stack through boto3: a deployed stack named with --stack (ordinary AWS
credentials), or the embedded emulation on this machine. Errors the user can fix are one line on stderr
and an exit code, turned so at one boundary (`_Group.invoke`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import botocore.exceptions
import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from controller import names, runs
from retrain import local, mlflow_ui, preflight, pretrained, timing
from retrain.collect import collect, find_run, runs_table
from retrain.demo import (
    DEMO_BATCHES,
    DEMO_DATASET,
    DEMO_TIMEOUT_MINUTES,
    PHOTO_PARAMETERS,
    Clock,
    DemoOptions,
    held_out_table,
    lineage_table,
    run_demo,
    timing_table,
)
from retrain.deployment import Deployment, connect
from retrain.errors import EmbeddedRuntimeError, NoCredentialsError, RetrainError, RunFailedError
from retrain.follow import ENDED_WELL, follow, plain_line, render, snapshot, wait_for_run
from retrain.predict import Answer
from retrain.predict import predict as predict_images
from retrain.report.build import write_report
from retrain.report.facts import RunFacts
from retrain.start import Overrides, parse_assignments, start_run
from retrain.summary import demo_summary, summary
from retrain.upload import check_dataset_name, find_files, upload_files
from retrain_contract import container, serving

RUNS_DIR = Path("runs")


class _Group(TyperGroup):
    """Turns the CLI's errors (and the AWS errors people cause) into one line and an exit code."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except RetrainError as error:
            _fail(str(error), error.exit_code)
        except (botocore.exceptions.NoCredentialsError, botocore.exceptions.PartialCredentialsError):
            _fail(
                str(NoCredentialsError("no AWS credentials found: run `aws configure` or set AWS_PROFILE")), 3
            )
        except KeyboardInterrupt:
            _fail("interrupted (the embedded stack saved its state in .retrain/)", 130)
        except botocore.exceptions.EndpointConnectionError as error:
            _fail(
                f"cannot reach {error.kwargs.get('endpoint_url', 'the AWS endpoint')}: if it is the embedded "
                "stack, start it again with `retrain local up`",
                EmbeddedRuntimeError.exit_code,
            )


def _fail(message: str, code: int) -> None:
    typer.echo(f"retrain: {message}", err=True)
    raise SystemExit(code)


app = typer.Typer(
    cls=_Group,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Event-driven retraining of image classifiers on AWS, or on the embedded emulation here.",
)
local_app = typer.Typer(cls=_Group, no_args_is_help=True, help="The embedded stack in the background.")
app.add_typer(local_app, name="local")
pretrained_app = typer.Typer(cls=_Group, no_args_is_help=True, help="Weights runs start from.")
app.add_typer(pretrained_app, name="pretrained")
# The emulated Step Functions interpreter logs every failed state; the CLI shows a run's failure itself.
QUIET_LOGGERS = ("moto.stepfunctions.parser", "werkzeug")


@app.callback()
def _options(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show the embedded runtime's logs.")
    ] = False,
) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if not verbose:
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)


StackOption = Annotated[
    str | None,
    typer.Option(
        "--stack", envvar="RETRAIN_STACK", help="A deployed stack's name (default: the embedded stack)."
    ),
]
StateDirOption = Annotated[Path, typer.Option("--state-dir", hidden=True)]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object at the end.")]
DatasetOption = Annotated[str | None, typer.Option("--dataset", help="The data set the run belongs to.")]


def _console(json_output: bool) -> Console:
    """Progress goes to stderr when stdout carries the JSON."""
    return Console(stderr=json_output, highlight=False)


@contextlib.contextmanager
def _deployment(
    stack: str | None, state_dir: Path, *, read_only: bool, from_state: bool = False
) -> Iterator[Deployment]:
    """The stack a command talks to: --stack on AWS, else the background embedded stack, else (to read a
    finished demo's runs, or with `from_state` to act on them) an embedded stack started for this command
    from the saved state."""
    if stack:
        yield connect(stack)
        return
    running = local.background(state_dir)
    if running is not None:
        yield running
        return
    if (read_only or from_state) and local.has_state(state_dir):
        with local.foreground(state_dir, read_only=read_only) as deployment:
            yield deployment
        return
    raise EmbeddedRuntimeError(
        "no stack to talk to: start the embedded one with `retrain local up` (or run `retrain demo`), "
        "or pass --stack NAME for a stack deployed on AWS"
    )


def _report_dir(run_id: str) -> Path:
    return RUNS_DIR / run_id


def _publish_report(deployment: Deployment, record: runs.RunRecord, out_dir: Path) -> str:
    """Locally the report stays in runs/<run-id>/; on AWS it is also copied under the run's S3 prefix."""
    if deployment.local:
        return str(out_dir / "report.md")
    bucket = deployment.output(names.STACK_OUTPUTS["artifact_bucket"])
    prefix = names.run_prefix(record["dataset"], record["run_id"]) + names.REPORT_DIR
    s3 = deployment.client("s3")
    for path in sorted(p for p in out_dir.rglob("*") if p.is_file()):
        s3.upload_file(str(path), bucket, prefix + path.relative_to(out_dir).as_posix())
    return names.report_uri(bucket, record["dataset"], record["run_id"])


def _report(deployment: Deployment, record: runs.RunRecord, *, upload_keys: set[str] | None) -> RunFacts:
    """The facts of a run that ended, with its report written (and on AWS published)."""
    out_dir = _report_dir(record["run_id"])
    facts = collect(deployment, record, out_dir=out_dir, upload_keys=upload_keys)
    _write_and_track(deployment, facts, out_dir)
    facts.report = _publish_report(deployment, record, out_dir)
    return facts


def _write_and_track(deployment: Deployment, facts: RunFacts, out_dir: Path) -> Path:
    """The report, also as artifacts of the run's MLflow run (what fails is a warning in the report)."""
    path = write_report(facts, out_dir)
    warning = mlflow_ui.log_report(deployment, facts.mlflow_run_id, out_dir)
    if warning:
        facts.tracking_warnings.append(warning)
        path = write_report(facts, out_dir)
    return path


def _finish(
    deployment: Deployment,
    record: runs.RunRecord,
    *,
    json_output: bool,
    console: Console,
    upload_keys: set[str] | None = None,
) -> None:
    """Report on a run that ended; print the JSON; fail (non-zero, reason on stderr) if the run failed."""
    _conclude(_report(deployment, record, upload_keys=upload_keys), json_output=json_output, console=console)


def _conclude(facts: RunFacts, *, json_output: bool, console: Console, quiet: bool = False) -> None:
    """Print a reported run's outcome (or its JSON summary; `quiet`: neither); fail if the run failed."""
    if json_output:
        typer.echo(json.dumps(summary(facts), default=str))
    elif not quiet:
        gate = {True: "passed", False: "rejected", None: "not reached"}[facts.gate_passed]
        if facts.status == "NOT_NEEDED":  # TrainWhen=drift: the champion does as well on the new uploads
            gate = "not reached, no retraining needed (the champion stays)"
        console.print(f"run {facts.run_id} {facts.status}; gate {gate}: {facts.gate_reason or '-'}")
        console.print(f"report: {facts.report}")
    if facts.status not in ENDED_WELL:
        reason = facts.failure or f"the run ended {facts.status}"
        raise RunFailedError(f"run {facts.run_id} failed: {reason} (report: {facts.report})")


@app.command()
# Typer reads the parameters as the command's options, one each.
def demo(  # noqa: PLR0913
    *,
    images: Annotated[
        Path | None, typer.Option("--images", help="Upload DIR/<label>/<image> instead of the digits.")
    ] = None,
    dataset: Annotated[str, typer.Option("--dataset", help="Data set name.")] = DEMO_DATASET,
    interrupt: Annotated[
        int, typer.Option("--interrupt", min=0, help="Spot interruptions of every training job.")
    ] = 1,
    fault: Annotated[
        list[str] | None, typer.Option("--fault", help="Inject a fault (repeatable), e.g. throttle:2.")
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option("--limit", min=10, help="Upload only the first N digits (default: all 1,797)."),
    ] = None,
    batches: Annotated[int, typer.Option("--batches", min=1, help="Upload batches.")] = DEMO_BATCHES,
    timeout: Annotated[int, typer.Option("--timeout", min=1, help="Minutes to wait.")] = DEMO_TIMEOUT_MINUTES,
    parameter: Annotated[
        list[str] | None,
        typer.Option("--parameter", "-p", help="A stack parameter NAME=VALUE over the demo's (repeatable)."),
    ] = None,
    json_output: JsonOption = False,
    state_dir: StateDirOption = local.DEFAULT_STATE_DIR,
) -> None:
    """Run the whole flow on the embedded stack: upload, ingest, tune on spot, evaluate, gate, register
    (the digits in two waves: a second run fine-tunes the first one's champion for a new label)."""
    options = DemoOptions(
        images=images,
        dataset=dataset,
        interrupt=interrupt,
        faults=tuple(fault or ()),
        limit=limit,
        batches=batches,
        timeout_minutes=timeout,
        state_dir=state_dir,
        parameters=tuple(parse_assignments(parameter or [], "--parameter").items()),
    )
    console = _console(json_output)
    timed: tuple[Clock, dict[str, list[timing.Phase]], bool] | None = None
    try:
        with run_demo(options, console=console, quiet=json_output) as ran:
            try:
                reported = [_report(ran.deployment, r, upload_keys=ran.upload_keys) for r in ran.records]
                ran.clock.lap("reports")
                if len(reported) > 1 and not json_output:
                    console.print(lineage_table(reported))
                if ran.held_out and not json_output:
                    console.print(held_out_table(ran, dataset))
                    ran.clock.lap("the champion's endpoint classifies the held-out digits")
                if json_output:
                    typer.echo(json.dumps(demo_summary(reported), default=str))
                _conclude(reported[-1], json_output=False, console=console, quiet=json_output)
            finally:
                if not json_output:
                    sfn = ran.deployment.client("stepfunctions")
                    phases = {
                        r["run_id"]: timing.run_phases(sfn, r["execution_arn"])
                        for r in ran.records
                        if r.get("execution_arn")
                    }
                    timed = ran.clock, phases, bool(ran.deployment.outputs.get(names.STACK_OUTPUTS["mlflow"]))
    finally:
        if timed is not None:
            clock, phases, mlflow = timed
            clock.lap("stop the stack, save its state")
            console.print(timing_table(clock.phases, phases))
            if mlflow:
                console.print(
                    f"Every run, trial and model is in MLflow (experiment retrain/{dataset}): "
                    "open it with `retrain ui`."
                )


@app.command()
def upload(
    folder: Annotated[Path, typer.Argument(help="A folder laid out as DIR/<label>/<image>.")],
    dataset: Annotated[str, typer.Option("--dataset", help="Data set name.")],
    stack: StackOption = None,
    state_dir: StateDirOption = local.DEFAULT_STATE_DIR,
) -> None:
    """Upload a folder of labelled images; the stack validates and records each one."""
    check_dataset_name(dataset)
    files = find_files(folder)
    with _deployment(stack, state_dir, read_only=False) as deployment:
        bucket = deployment.output(names.STACK_OUTPUTS["data_bucket"])
        keys = upload_files(deployment.client("s3"), bucket, dataset, files)
    typer.echo(
        f"uploaded {len(keys)} files to s3://{bucket}/{names.dataset_prefix(dataset)}; each is validated "
        "and recorded in the ledger, rejected ones with a reason (`retrain report RUN` lists them)"
    )


@pretrained_app.command("upload")
def pretrained_upload(
    weights: Annotated[
        Path | None,
        typer.Argument(
            help="A weights file (.pth/.pt state_dict or model.tar.gz); default: ImageNet EfficientNet-Lite0."
        ),
    ] = None,
    stack: StackOption = None,
    state_dir: StateDirOption = local.DEFAULT_STATE_DIR,
) -> None:
    """Put weights in the stack's artifact bucket, where its training jobs can read them."""
    path = weights or pretrained.imagenet_efficientnet_lite0()
    with _deployment(stack, state_dir, read_only=False) as deployment:
        uri = pretrained.upload(deployment, path)
    typer.echo(
        f"uploaded {path.name} to {uri}. Start a run from it: retrain start --dataset NAME --pretrained {uri}"
        f" (model {pretrained.architecture_of(path)}); or make it every new data set's start: deploy with "
        f"PretrainedModelUri={uri}"
    )


@app.command()
# Typer reads the parameters as the command's options, one each.
def start(  # noqa: PLR0913
    *,
    dataset: Annotated[str, typer.Option("--dataset", help="Data set name.")],
    max_jobs: Annotated[int | None, typer.Option("--max-jobs", min=1, help="Tuning trials.")] = None,
    parallel_jobs: Annotated[int | None, typer.Option("--parallel-jobs", min=1)] = None,
    instance_type: Annotated[str | None, typer.Option("--instance-type", help="e.g. ml.g5.xlarge")] = None,
    epochs: Annotated[int | None, typer.Option("--epochs", min=1)] = None,
    image_size: Annotated[int | None, typer.Option("--image-size", min=16)] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size", min=1)] = None,
    model: Annotated[str | None, typer.Option("--model", help=" | ".join(container.MODELS))] = None,
    spot: Annotated[bool | None, typer.Option("--spot/--no-spot", help="Managed spot training.")] = None,
    pretrained: Annotated[
        str | None,
        typer.Option(
            "--pretrained", help="Start from these weights: s3://bucket/key (.pth, .pt, model.tar.gz)."
        ),
    ] = None,
    start_from: Annotated[
        str | None,
        typer.Option(
            "--start-from",
            help="champion | pretrained | imagenet | scratch (default: the champion, else the stack's "
            "weights, else ImageNet where the image has the architecture's weights).",
        ),
    ] = None,
    hyperparameter: Annotated[
        list[str] | None,
        typer.Option("--hyperparameter", "-H", help="Fixed NAME=VALUE (repeatable); skips tuning of it."),
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the run until it ends, then report.")] = False,
    timeout: Annotated[int, typer.Option("--timeout", min=1, help="Minutes to wait.")] = DEMO_TIMEOUT_MINUTES,
    json_output: JsonOption = False,
    stack: StackOption = None,
    state_dir: StateDirOption = local.DEFAULT_STATE_DIR,
) -> None:
    """Start a run now, with optional overrides of the stack's training settings."""
    overrides = Overrides(
        max_jobs=max_jobs,
        parallel_jobs=parallel_jobs,
        instance_type=instance_type,
        epochs=epochs,
        image_size=image_size,
        batch_size=batch_size,
        model=model,
        spot=spot,
        pretrained_model_uri=pretrained,
        start_from=start_from,
        hyperparameters=parse_assignments(hyperparameter or [], "--hyperparameter"),
    )
    check_dataset_name(dataset)
    console = _console(json_output)
    with _deployment(stack, state_dir, read_only=False) as deployment:
        arn, run_id = start_run(deployment, dataset, overrides)
        if not wait:
            typer.echo(
                json.dumps({"run_id": run_id, "execution_arn": arn})
                if json_output
                else f"started run {run_id} ({arn}); follow it with `retrain status {run_id}`"
            )
            return
        record = wait_for_run(
            deployment, dataset, run_id=run_id, execution_arn=arn, timeout_seconds=timeout * 60
        )
        record = follow(
            deployment, record, console=console, live=console.is_terminal, timeout_seconds=timeout * 60
        )
        _finish(deployment, record, json_output=json_output, console=console)


@app.command()
def status(
    run_id: Annotated[
        str | None, typer.Argument(metavar="[RUN]", help="Run id (default: the newest run).")
    ] = None,
    dataset: DatasetOption = None,
    json_output: JsonOption = False,
    stack: StackOption = None,
    state_dir: StateDirOption = local.DEFAULT_STATE_DIR,
) -> None:
    """Where a run is: its state, the states it went through, its jobs."""
    console = _console(False)
    with _deployment(stack, state_dir, read_only=True) as deployment:
        if run_id is None:
            found = runs.list_runs(
                table_name=runs_table(deployment), dataset=dataset, client=deployment.client("dynamodb")
            )
            if not found:
                raise RetrainError(
                    "no runs yet: upload images (`retrain upload`) or start one (`retrain start`)"
                )
            record = found[0]
        else:
            record = find_run(deployment, run_id, dataset)
        shot = snapshot(deployment, record)
    if json_output:
        typer.echo(json.dumps(asdict(shot)))
    elif console.is_terminal:
        console.print(render(shot))
    else:
        typer.echo(plain_line(shot))


@app.command("runs")
def list_runs_command(
    dataset: DatasetOption = None,
    json_output: JsonOption = False,
    stack: StackOption = None,
    state_dir: StateDirOption = local.DEFAULT_STATE_DIR,
) -> None:
    """The runs, newest first."""
    if dataset is not None:
        check_dataset_name(dataset)
    with _deployment(stack, state_dir, read_only=True) as deployment:
        found = runs.list_runs(
            table_name=runs_table(deployment), dataset=dataset, client=deployment.client("dynamodb")
        )
    rows = [
        {
            "run_id": r["run_id"],
            "dataset": r["dataset"],
            "status": r["status"],
            "created_at": r.get("created_at", ""),
            "gate": r.get("gate", {}).get("decision", ""),
            "objective": r.get("best_objective"),
            "model_package": r.get("model_package_arn", ""),
        }
        for r in found
    ]
    if json_output:
        typer.echo(json.dumps(rows))
        return
    if not rows:
        typer.echo("no runs yet: upload images (`retrain upload`) or start one (`retrain start`)")
        return
    table = Table("run", "dataset", "status", "created", "gate", "objective", box=None, header_style="bold")
    for row in rows:
        objective = "-" if row["objective"] is None else f"{row['objective']:.4f}"
        created = str(row["created_at"]).replace("T", " ")[:19]
        cells = [str(row[k] or "-") for k in ("run_id", "dataset", "status")] + [
            created,
            str(row["gate"] or "-"),
        ]
        table.add_row(*cells, objective)
    Console(highlight=False).print(table)


@app.command()
def report(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="Run id (see `retrain runs`).")],
    dataset: DatasetOption = None,
    json_output: JsonOption = False,
    stack: StackOption = None,
    state_dir: StateDirOption = local.DEFAULT_STATE_DIR,
) -> None:
    """Write a run's report (runs/<run-id>/report.md with charts; also under the run's S3 prefix on AWS)."""
    with _deployment(stack, state_dir, read_only=True) as deployment:
        record = find_run(deployment, run_id, dataset)
        out_dir = _report_dir(record["run_id"])
        facts = collect(deployment, record, out_dir=out_dir)
        path = _write_and_track(deployment, facts, out_dir)
        facts.report = _publish_report(deployment, record, out_dir)
    where = facts.report if facts.report == str(path) else f"{facts.report} (and {path})"
    typer.echo(json.dumps(summary(facts)) if json_output else f"report: {where}")


@app.command("predict")
def predict_command(
    images: Annotated[list[Path], typer.Argument(metavar="IMAGE...", help="JPEG or PNG files to classify.")],
    dataset: Annotated[
        str | None, typer.Option("--dataset", help="The data set whose champion answers.")
    ] = None,
    model_package: Annotated[
        str | None, typer.Option("--model-package", help="A model package ARN (default: the champion's).")
    ] = None,
    top_k: Annotated[
        int, typer.Option("--top-k", min=1, max=serving.TOP_K, help="Labels shown per image.")
    ] = 3,
    approve: Annotated[
        bool,
        typer.Option("--approve", help="Embedded stack: approve the package (as its reviewer) to deploy it."),
    ] = False,
    json_output: JsonOption = False,
    stack: StackOption = None,
    state_dir: StateDirOption = local.DEFAULT_STATE_DIR,
) -> None:
    """Classify images with a data set's champion (or a model package) through its SageMaker endpoint."""
    if dataset is not None:
        check_dataset_name(dataset)
    with _deployment(stack, state_dir, read_only=False, from_state=True) as deployment:
        arn, endpoint, answers = predict_images(
            deployment, images, dataset=dataset, package_arn=model_package, approve_package=approve
        )
    if json_output:
        typer.echo(
            json.dumps(
                {
                    "model_package_arn": arn,
                    "endpoint": endpoint,
                    "images": [
                        {"image": str(a.image), "predictions": a.predictions[:top_k]} for a in answers
                    ],
                }
            )
        )
        return
    Console(highlight=False).print(predictions_table(arn, endpoint, answers, top_k))


def predictions_table(arn: str, endpoint: str, answers: list[Answer], top_k: int) -> Table:
    table = Table(title=f"{arn} (endpoint {endpoint})", title_justify="left", header_style="bold", box=None)
    table.add_column("image")
    for rank in range(1, top_k + 1):
        table.add_column(f"#{rank}")
    for answer in answers:
        cells = [f"{p['label']} {p['probability']:.3f}" for p in answer.predictions[:top_k]]
        table.add_row(str(answer.image), *cells)
    return table


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@app.command()
def ui(
    port: Annotated[int, typer.Option("--port", help="Embedded stack: the local port to serve on.")] = 5000,
    stack: StackOption = None,
    state_dir: StateDirOption = local.DEFAULT_STATE_DIR,
) -> None:
    """Open MLflow, where every run, trial and model is tracked (one experiment per data set)."""
    if stack:
        deployment = connect(stack)
        url = mlflow_ui.presigned_url(deployment.client("sagemaker"), mlflow_ui.tracking_arn(deployment))
        typer.echo(
            f"MLflow (SageMaker): {url}\n(the link works once, within 5 minutes: run `retrain ui` again)"
        )
        return
    # SIGTERM ends the server as Ctrl-C does (the read-only stack and MLflow's process stop with it).
    signal.signal(signal.SIGTERM, _interrupt)
    with (
        _deployment(None, state_dir, read_only=True) as deployment,
        mlflow_ui.local_ui(deployment, state_dir, port) as url,
    ):
        typer.echo(f"MLflow UI: {url} (experiments retrain/<dataset>; Ctrl-C stops it)")
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


@app.command("preflight")
def preflight_command(
    *,
    region: Annotated[
        str | None, typer.Option("--region", help="The region to check (default: your AWS configuration's).")
    ] = None,
    parameter: Annotated[
        list[str] | None,
        typer.Option("--parameter", "-p", help="A template parameter NAME=VALUE to check with (repeatable)."),
    ] = None,
    instance_type: Annotated[
        str | None,
        typer.Option("--instance-type", help="Training instance type (default: TrainingInstanceType's)."),
    ] = None,
    stack_rate: Annotated[
        float | None,
        typer.Option(
            "--stack-rate", min=1.0, help="Uploads/s the stack records (default: from BENCHMARKS.md)."
        ),
    ] = None,
    local_stack: Annotated[
        bool, typer.Option("--local", help="The embedded stack `retrain local up` started, and its account.")
    ] = False,
    json_output: JsonOption = False,
    stack: StackOption = None,
    state_dir: StateDirOption = local.DEFAULT_STATE_DIR,
) -> None:
    """What will bind in an account and region (Lambda concurrency, EventBridge, SageMaker and FSx quotas,
    CloudFormation's resource types), and what to ask for; exit code 8 when something binds."""
    preflight.command(
        preflight.Options(
            region=region,
            stack=stack,
            local=local_stack,
            overrides=parse_assignments(parameter or [], "--parameter"),
            instance_type=instance_type,
            stack_rate=stack_rate,
            json_output=json_output,
            state_dir=state_dir,
        )
    )


@local_app.command("up")
def local_up(
    parameter: Annotated[
        list[str] | None,
        typer.Option(
            "--parameter",
            "-p",
            help="Template parameter NAME=VALUE (repeatable; default: those of `retrain demo --images`).",
        ),
    ] = None,
    state_dir: StateDirOption = local.DEFAULT_STATE_DIR,
) -> None:
    """Start the embedded stack in the background (state kept in .retrain/)."""
    overrides = {**PHOTO_PARAMETERS, **parse_assignments(parameter or [], "--parameter")}
    endpoint = local.up(state_dir, parameter_overrides=overrides)
    typer.echo(f"embedded stack running at {endpoint}; stop it with `retrain local down`")


@local_app.command("down")
def local_down(state_dir: StateDirOption = local.DEFAULT_STATE_DIR) -> None:
    """Stop the background embedded stack (its state stays in .retrain/)."""
    stopped = local.down(state_dir)
    typer.echo("embedded stack stopped" if stopped else "no embedded stack was running")


def main() -> None:
    app(prog_name="retrain")


if __name__ == "__main__":
    main()
