"""FSx for Lustre emulation: data repository import tasks over a local mirror of the S3 repository."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from retrain.embedded.faults import Faults
from retrain.embedded.fsx import emulator as emulator_module
from retrain.embedded.fsx.api import install_api
from retrain.embedded.fsx.emulator import IMPORT_TASK, FsxEmulator

BUCKET = "data-bucket"


@pytest.fixture
def s3() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        for key in ("data/digits/0/a.png", "data/digits/1/b.png", "data/other/0/c.png"):
            client.put_object(Bucket=BUCKET, Key=key, Body=key.encode())
        yield client


def _file_system(fsx: FsxEmulator) -> dict[str, Any]:
    created = fsx.create_file_system(
        FileSystemType="LUSTRE",
        StorageCapacity=1200,
        LustreConfiguration={"ImportPath": f"s3://{BUCKET}/data"},
    )
    return dict(created["FileSystem"])


def _wait(fsx: FsxEmulator, task_id: str) -> dict[str, Any]:
    fsx.wait()
    return dict(fsx.describe_data_repository_tasks(TaskIds=[task_id])["DataRepositoryTasks"][0])


def _import(fsx: FsxEmulator, fs_id: str, **extra: Any) -> str:
    request = {"FileSystemId": fs_id, "Type": IMPORT_TASK, "Paths": ["digits"], "Report": {"Enabled": False}}
    return str(fsx.create_data_repository_task(**{**request, **extra})["DataRepositoryTask"]["TaskId"])


def test_import_task_mirrors_only_the_requested_paths(tmp_path: Path, s3: Any) -> None:
    fsx = FsxEmulator(tmp_path, s3_client=s3)
    fs = _file_system(fsx)

    task = _wait(fsx, _import(fsx, fs["FileSystemId"]))

    assert task["Lifecycle"] == "SUCCEEDED"
    assert task["Status"]["TotalCount"] == task["Status"]["SucceededCount"] == 2
    mount = fsx.mount_path(fs["FileSystemId"], f"/{fs['LustreConfiguration']['MountName']}/digits")
    assert sorted(p.relative_to(mount).as_posix() for p in mount.rglob("*.png")) == ["0/a.png", "1/b.png"]
    assert (mount / "0" / "a.png").read_bytes() == b"data/digits/0/a.png"


def test_second_import_drops_files_deleted_from_the_repository(tmp_path: Path, s3: Any) -> None:
    fsx = FsxEmulator(tmp_path, s3_client=s3)
    fs = _file_system(fsx)
    _wait(fsx, _import(fsx, fs["FileSystemId"]))
    s3.delete_object(Bucket=BUCKET, Key="data/digits/1/b.png")

    _wait(fsx, _import(fsx, fs["FileSystemId"]))

    mount = fsx.mount_path(fs["FileSystemId"], f"/{fs['LustreConfiguration']['MountName']}/digits")
    assert [p.name for p in mount.rglob("*.png")] == ["a.png"]


def test_a_second_task_while_one_runs_is_refused(tmp_path: Path, s3: Any) -> None:
    fsx = FsxEmulator(tmp_path, s3_client=s3)
    fs = _file_system(fsx)
    fsx._tasks["task-running"] = {"FileSystemId": fs["FileSystemId"], "Lifecycle": "EXECUTING"}

    with pytest.raises(ClientError) as raised:
        _import(fsx, fs["FileSystemId"])

    assert raised.value.response["Error"]["Code"] == "DataRepositoryTaskExecuting"


def test_injected_import_fault_fails_the_task_and_writes_the_report(tmp_path: Path, s3: Any) -> None:
    fsx = FsxEmulator(tmp_path, s3_client=s3, faults=Faults.parse(["import-fails"]))
    fs = _file_system(fsx)
    report = _report(f"s3://{BUCKET}/data/_fsx-reports/digits/run-1")

    task = _wait(fsx, _import(fsx, fs["FileSystemId"], Report=report))

    assert task["Lifecycle"] == "FAILED"
    assert "injected fault" in task["FailureDetails"]["Message"]
    key = f"data/_fsx-reports/digits/run-1/{task['TaskId']}/failures.csv"
    assert "injected fault" in s3.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode()


def _report(path: str) -> dict[str, Any]:
    return {"Enabled": True, "Path": path, "Format": "REPORT_CSV_20191124", "Scope": "FAILED_FILES_ONLY"}


@pytest.mark.parametrize(
    "path",
    [
        f"s3://{BUCKET}/reports",
        "s3://artifact-bucket/runs/digits/run-1/fsx-reports",
        f"s3://{BUCKET}/database",
    ],
)
def test_a_report_path_outside_the_linked_repository_is_refused(tmp_path: Path, s3: Any, path: str) -> None:
    # GIVEN a file system linked to s3://<bucket>/data
    fsx = FsxEmulator(tmp_path, s3_client=s3)
    fs = _file_system(fsx)
    # WHEN an import asks for its completion report elsewhere
    with pytest.raises(ClientError) as raised:
        _import(fsx, fs["FileSystemId"], Report=_report(path))
    # THEN FSx refuses the task, naming the path and the linked repository
    assert raised.value.response["Error"]["Code"] == "BadRequest"
    assert path in str(raised.value) and f"s3://{BUCKET}/data" in str(raised.value)
    assert fsx.describe_data_repository_tasks()["DataRepositoryTasks"] == []


def test_mount_path_refuses_a_directory_outside_the_mount(tmp_path: Path, s3: Any) -> None:
    fsx = FsxEmulator(tmp_path, s3_client=s3)
    fs = _file_system(fsx)

    with pytest.raises(ClientError, match="must start with"):
        fsx.mount_path(fs["FileSystemId"], "/elsewhere/digits")


def test_records_survive_a_restart(tmp_path: Path, s3: Any) -> None:
    fsx = FsxEmulator(tmp_path, s3_client=s3)
    fs = _file_system(fsx)
    task_id = _wait(fsx, _import(fsx, fs["FileSystemId"]))["TaskId"]

    again = FsxEmulator(tmp_path, s3_client=s3)

    assert (
        again.describe_data_repository_tasks(TaskIds=[task_id])["DataRepositoryTasks"][0]["Lifecycle"]
        == "SUCCEEDED"
    )


def test_boto3_fsx_calls_reach_the_emulation_through_moto(tmp_path: Path, s3: Any) -> None:
    fsx = FsxEmulator(tmp_path, s3_client=s3)
    client = boto3.client("fsx", region_name="us-east-1")
    with install_api(fsx):
        fs_id = client.create_file_system(
            FileSystemType="LUSTRE",
            StorageCapacity=1200,
            SubnetIds=["subnet-0123456789abcdef0"],
            LustreConfiguration={"ImportPath": f"s3://{BUCKET}/data"},
        )["FileSystem"]["FileSystemId"]
        task_id = client.create_data_repository_task(
            FileSystemId=fs_id, Type=IMPORT_TASK, Paths=["digits"], Report={"Enabled": False}
        )["DataRepositoryTask"]["TaskId"]
        fsx.wait()
        described = client.describe_data_repository_tasks(TaskIds=[task_id])["DataRepositoryTasks"][0]
        with pytest.raises(ClientError) as missing:
            client.describe_file_systems(FileSystemIds=["fs-0000000000000000a"])

    assert described["Lifecycle"] == "SUCCEEDED"
    assert missing.value.response["Error"]["Code"] == "FileSystemNotFound"


def test_a_data_repository_association_maps_its_file_system_path_to_the_s3_prefix(
    tmp_path: Path, s3: Any
) -> None:
    fsx = FsxEmulator(tmp_path, s3_client=s3)
    fs_id = fsx.create_file_system(FileSystemType="LUSTRE", StorageCapacity=1200)["FileSystem"][
        "FileSystemId"
    ]
    fsx.create_data_repository_association(
        FileSystemId=fs_id, FileSystemPath="/data", DataRepositoryPath=f"s3://{BUCKET}/data/"
    )
    mount_name = fsx.describe_file_systems(FileSystemIds=[fs_id])["FileSystems"][0]["LustreConfiguration"][
        "MountName"
    ]

    task = _wait(fsx, _import(fsx, fs_id, Paths=[f"s3://{BUCKET}/data/digits/0/"]))

    assert task["Lifecycle"] == "SUCCEEDED"
    mount = fsx.mount_path(fs_id, f"/{mount_name}/data/digits")
    assert [p.relative_to(mount).as_posix() for p in mount.rglob("*.png")] == ["0/a.png"]


def test_a_path_no_association_covers_fails_the_task(tmp_path: Path, s3: Any) -> None:
    fsx = FsxEmulator(tmp_path, s3_client=s3)
    fs_id = fsx.create_file_system(FileSystemType="LUSTRE", StorageCapacity=1200)["FileSystem"][
        "FileSystemId"
    ]
    fsx.create_data_repository_association(
        FileSystemId=fs_id, FileSystemPath="/data", DataRepositoryPath=f"s3://{BUCKET}/data/"
    )

    task = _wait(fsx, _import(fsx, fs_id, Paths=["elsewhere/x"]))

    assert task["Lifecycle"] == "FAILED"


def test_a_shutdown_while_a_task_is_being_started_does_not_crash(
    tmp_path: Path, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a task whose thread has been made but not started yet (a request in flight at shutdown)
    fsx = FsxEmulator(tmp_path, s3_client=s3)
    fs = _file_system(fsx)
    made, release = threading.Event(), threading.Event()

    class HeldThread(threading.Thread):
        def start(self) -> None:
            made.set()
            release.wait(30)
            super().start()

    creating = threading.Thread(target=_import, args=(fsx, fs["FileSystemId"]))
    monkeypatch.setattr(emulator_module.threading, "Thread", HeldThread)
    creating.start()
    assert made.wait(30)

    # WHEN the stack waits for its tasks meanwhile THEN it returns (there is no started task to join)
    try:
        fsx.wait(timeout=1)
    finally:
        release.set()
        creating.join(30)
    fsx.wait()
