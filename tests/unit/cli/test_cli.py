from __future__ import annotations

import json
import threading

import boto3
import pytest
from rich.console import Console
from typer.testing import CliRunner

import retrain.cli
import retrain.commands._shared
import retrain.commands.report
import retrain.demo.flow
from controller import runs
from retrain.deployment import connect
from retrain.errors import RetrainError, RunFailedError
from retrain.report.build import REPORT_FILE
from retrain.report.summary import SUMMARY_KEYS
from retrain_contract.ledger import LEDGER_SHARDS, Partitions
from tests.unit.cli import recorded_run

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(retrain.cli.app, list(args))


@pytest.fixture
def recorded(stack, recorded_sagemaker, monkeypatch, tmp_path):
    """A finished run in the moto account; SageMaker's answers about it come from the recording."""
    monkeypatch.chdir(tmp_path)

    def connect_recorded(name, **kwargs):
        deployment = connect(name, **kwargs)
        deployment.clients["sagemaker"] = recorded_sagemaker
        return deployment

    monkeypatch.setattr(retrain.commands._shared, "connect", connect_recorded)
    return recorded_run.write(stack)


def test_runs_lists_the_runs_as_json(stack, recorded):
    # WHEN the runs are listed as JSON
    result = invoke("runs", "--stack", stack.name, "--json")
    # THEN the recorded run is there with its status, gate and objective
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert (row["run_id"], row["status"], row["gate"], row["objective"]) == (
        "r1",
        "SUCCEEDED",
        "accepted",
        0.95,
    )


def test_runs_without_any_run_says_how_to_get_one(stack):
    result = invoke("runs", "--stack", stack.name)
    assert result.exit_code == 0
    assert "no runs yet" in result.stdout


def test_status_shows_the_runs_jobs_and_interruptions(stack, recorded):
    # WHEN the status of the run is asked for, plainly (not a TTY)
    result = invoke("status", "r1", "--stack", stack.name, "--json")
    # THEN it has the run's trials with their objectives and interruptions
    assert result.exit_code == 0, result.output
    shot = json.loads(result.stdout)
    assert shot["status"] == "SUCCEEDED"
    assert [(j["objective"], j["interruptions"], j["resumes"]) for j in shot["jobs"]] == [
        (0.91, 1, 1), (0.95, 1, 1), (0.62, 0, 0)
    ]  # fmt: skip
    # AND the data set's refused uploads with their problems (a later wave's too), the label set aside and
    # the unreadable file
    assert {r["key"]: r["problem"] for r in shot["rejected"]} == {
        **{key: recorded_run.PROBLEMS.get(key, "layout") for key in recorded_run.REJECTED},
        **dict.fromkeys(recorded_run.LATER_REJECTED, "duplicate"),
    }
    assert set(shot["excluded_labels"]) == {"lynx"}
    assert shot["unreadable"] == [{"key": "data/digits/zero/img-2.jpg", "reason": "image file is truncated"}]
    # AND what the run started from: kind, weights, the champion's package, why
    assert shot["started_from"] == recorded_run.STARTED_FROM


def test_status_on_a_terminal_lists_each_refused_file_and_why(stack, recorded, recorded_sagemaker):
    from rich.console import Console

    from retrain.run.follow import render, snapshot

    deployment = connect(stack.name)
    deployment.clients["sagemaker"] = recorded_sagemaker
    console = Console(width=200, record=True)
    console.print(render(snapshot(deployment, recorded)))
    text = console.export_text()
    assert "data/digits/one/fake.jpg" in text and "content" in text and "not an image" in text
    assert "label set aside: lynx: 2 image(s)" in text


def test_report_writes_the_run_folder_and_prints_the_summary(stack, recorded, tmp_path):
    # WHEN the report of the run is written
    result = invoke("report", "r1", "--stack", stack.name, "--json")
    # THEN runs/r1/ holds report.md and the JSON summary names it ... on AWS the report is also in S3
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert tuple(document) == SUMMARY_KEYS
    assert document["started_from"] == recorded_run.STARTED_FROM
    assert (tmp_path / "runs" / "r1" / REPORT_FILE).is_file()
    assert document["report"] == f"s3://retrain-artifacts-test/runs/digits/r1/report/{REPORT_FILE}"
    s3 = boto3.client("s3")
    body = s3.get_object(Bucket="retrain-artifacts-test", Key=f"runs/digits/r1/report/{REPORT_FILE}")["Body"]
    assert body.read().startswith(b"# Run r1")


def test_report_of_an_unknown_run_says_where_to_look(stack, recorded):
    result = invoke("report", "nope", "--stack", stack.name)
    assert result.exit_code == 5
    assert result.stderr == "retrain: no run 'nope': list the runs with `retrain runs`\n"


def test_upload_puts_the_folder_under_the_dataset_prefix(stack, tmp_path):
    # GIVEN a folder with one label folder
    (tmp_path / "imgs" / "cat").mkdir(parents=True)
    (tmp_path / "imgs" / "cat" / "a.jpg").write_bytes(b"\xff\xd8")
    # WHEN it is uploaded
    result = invoke("upload", str(tmp_path / "imgs"), "--dataset", "pets", "--stack", stack.name)
    # THEN the object is in the data bucket where the control plane looks
    assert result.exit_code == 0, result.output
    objects = boto3.client("s3").list_objects_v2(Bucket="retrain-data-test")["Contents"]
    assert [o["Key"] for o in objects] == ["data/pets/cat/a.jpg"]


def test_start_starts_the_state_machine_with_the_manual_input(stack):
    # WHEN a run is started by hand with overrides
    result = invoke(
        "start", "--dataset", "pets", "--max-jobs", "4", "-H", "lr=0.01", "--stack", stack.name, "--json"
    )
    # THEN an execution of the stack's state machine runs with the dataset and the overrides
    assert result.exit_code == 0, result.output
    arn = json.loads(result.stdout)["execution_arn"]
    execution = boto3.client("stepfunctions").describe_execution(executionArn=arn)
    document = json.loads(execution["input"])
    assert document["dataset"] == "pets"
    assert document["overrides"] == {"max_jobs": 4, "hyperparameters": {"lr": "0.01"}}


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("runs", "--stack", "nope"), 4, "stack 'nope' not found in us-east-1"),
        (("upload", ".", "--dataset", "bad name", "--stack", "x"), 2, "bad dataset name 'bad name'"),
        (
            ("start", "--dataset", "pets", "-H", "lr", "--stack", "x"),
            2,
            "--hyperparameter 'lr' is not NAME=VALUE",
        ),
    ],
)
def test_errors_are_one_line_of_guidance_without_a_traceback(stack, args, code, message):
    result = invoke(*args)
    assert result.exit_code == code
    assert result.stderr.startswith("retrain: ") and message in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output


def test_empty_folder_is_refused_before_any_upload(stack, tmp_path):
    result = invoke("upload", str(tmp_path), "--dataset", "pets", "--stack", stack.name)
    assert result.exit_code == 2
    assert "has no files" in result.stderr
    assert "Contents" not in boto3.client("s3").list_objects_v2(Bucket="retrain-data-test")


def test_no_credentials_is_guidance(monkeypatch):
    # GIVEN no credentials anywhere (and no instance metadata to ask)
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    # WHEN a command needs the stack
    result = invoke("runs", "--stack", "retrain")
    # THEN one line says how to configure credentials
    assert result.exit_code == 3
    assert "no AWS credentials found: run `aws configure`" in result.stderr
    assert "Traceback" not in result.output


def test_a_failed_run_prints_its_summary_then_fails_with_the_reason(stack, recorded, capsys):
    # GIVEN a run that failed in tuning
    failure = {"error": "SageMaker.ResourceLimitExceeded", "cause": "too many ml.g5.xlarge instances"}
    failed = recorded_run.record("FAILED", run_id="r2", failure=failure)
    failed.pop("gate")
    runs.put_run(failed, table_name=stack.output("runs_table"), client=boto3.client("dynamodb"))
    deployment = retrain.commands._shared.connect(stack.name)
    # WHEN the end of the run is reported as JSON
    with pytest.raises(RunFailedError) as raised:
        retrain.commands.report.finish(
            deployment, failed, json_output=True, console=retrain.commands._shared.console_for(True)
        )
    # THEN the JSON still comes out, with the failed status, and the error carries the reason
    document = json.loads(capsys.readouterr().out)
    assert (document["status"], document["gate"]["passed"]) == ("FAILED", None)
    assert "SageMaker.ResourceLimitExceeded: too many ml.g5.xlarge instances" in str(raised.value)
    assert raised.value.exit_code != 0


def test_without_a_stack_or_a_local_one_the_cli_says_how_to_get_one(tmp_path):
    # GIVEN no --stack, no background embedded stack and no saved embedded state
    result = invoke("runs", "--state-dir", str(tmp_path / "state"))
    # THEN it says to start the embedded stack or name a deployed one
    assert result.exit_code == 7
    assert "retrain local up" in result.stderr and "--stack NAME" in result.stderr


def test_local_down_without_a_running_stack_says_so(tmp_path):
    result = invoke("local", "down", "--state-dir", str(tmp_path / "state"))
    assert result.exit_code == 0
    assert result.stdout == "no embedded stack was running\n"


def _ledger(stack, rows: dict[str, tuple[str, str]]) -> None:
    """Ledger rows of data set d, in its partitions: key -> (recorded_at, state); a refused one with its
    reason."""
    dynamodb = boto3.client("dynamodb")
    parts = Partitions("d", LEDGER_SHARDS)  # no row of its own yet: a data set first seen now
    for key, (at, state) in rows.items():
        item = {"dataset": parts.of(key), "key": key, "state": state, "recorded_at": at}
        if state == "rejected":
            item |= {"problem": "content", "reason": "not an image: cannot identify image file"}
        dynamodb.put_item(TableName=stack.output("ledger_table"), Item=runs.serialize(item))


def test_the_demo_waits_for_every_upload_of_its_wave_accepted_or_refused(stack):
    # GIVEN a row of an earlier demo and, of this wave's three uploads, one accepted and one refused row
    _ledger(stack, {"data/d/a/old.jpg": ("2026-11-21T10:00:00.0Z", "accepted"),
                    "data/d/a/1.jpg": ("2026-11-22T05:00:01.5Z", "accepted"),
                    "data/d/b/2.jpg": ("2026-11-22T05:00:02.0Z", "rejected")})  # fmt: skip
    wave = {"data/d/a/1.jpg", "data/d/b/2.jpg", "data/d/b/3.jpg"}
    console = Console(record=True, width=200)
    deployment = connect(stack.name)
    # WHEN the last one is recorded while the demo waits
    timer = threading.Timer(0.5, _ledger, (stack, {"data/d/b/3.jpg": ("2026-11-22T05:00:03.0Z", "accepted")}))
    timer.start()
    accepted, rejected = retrain.demo.flow.wait_until_recorded(
        deployment, "d", "2026-11-22T05:00:00", wave, console=console, timeout_seconds=60, poll_seconds=0.1
    )
    timer.join()
    # THEN it returns this wave's accepted count and refusals, having said each change of the count once
    assert accepted == 2
    assert [(r.key, r.problem) for r in rejected] == [("data/d/b/2.jpg", "content")]
    assert console.export_text() == (
        "waiting for the run: 2 of 3 uploads recorded in the ledger (1 refused)\n"
        "waiting for the run: 3 of 3 uploads recorded in the ledger (1 refused)\n"
    )


def test_the_demo_says_how_many_uploads_were_never_recorded_and_where_to_look(stack):
    _ledger(stack, {"data/d/a/1.jpg": ("2026-11-22T05:00:01.5Z", "accepted")})
    console = Console(record=True, width=200)
    with pytest.raises(RetrainError, match=r"only 1 of 2 uploads .* dead-letter queue"):
        retrain.demo.flow.wait_until_recorded(
            connect(stack.name),
            "d",
            "2026-11-22T05:00:00",
            {"data/d/a/1.jpg", "data/d/a/2.jpg"},
            console=console,
            timeout_seconds=0,
        )


def test_demo_refuses_limit_with_images_before_starting_anything(tmp_path):
    result = invoke(
        "demo", "--images", str(tmp_path), "--limit", "50", "--state-dir", str(tmp_path / "state")
    )
    assert result.exit_code == 2
    assert "--limit applies to the digits" in result.stderr
    assert not (tmp_path / "state").exists()
