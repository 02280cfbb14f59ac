"""FSx for Lustre emulation: file systems linked to an S3 data repository, and data repository tasks.

moto 5.2.5's fsx backend stores file systems but has no data repository tasks. Here a file system is a
local directory (``<root>/<file system id>``); an IMPORT_METADATA_FROM_REPOSITORY task mirrors the linked
S3 prefix (limited to the task's Paths) into it, moving PENDING -> EXECUTING -> SUCCEEDED/FAILED in the
background, counting files, refusing a second task with ``DataRepositoryTaskExecuting`` while one runs,
and writing a completion report to S3 when asked. Training jobs see the directory through
``mount_path()`` (their FileSystemDataSource). :mod:`retrain.embedded.fsx.api` makes the moto server's FSx
HTTP API answer from this emulation too, so Lambdas and the CLI reach it with plain boto3.
"""

from __future__ import annotations

import csv
import datetime
import io
import json
import secrets
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Final, Protocol

from botocore.exceptions import ClientError

from retrain.embedded.account import ACCOUNT_ID, REGION
from retrain.embedded.s3files import get_file

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

IMPORT_TASK: Final = "IMPORT_METADATA_FROM_REPOSITORY"
RUNNING_LIFECYCLES: Final = frozenset({"PENDING", "EXECUTING"})
REPORT_FILE: Final = "failures.csv"


class ImportFaults(Protocol):
    def import_task_fails(self, file_system_id: str) -> bool: ...


def _error(code: str, message: str, status: int = 400) -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, code)


def _split_s3(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://"):
        raise _error(
            "BadRequest", f"{uri!r} is not an s3:// URI; give ImportPath/Report.Path as s3://bucket/prefix"
        )
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    return bucket, prefix.strip("/")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class FsxEmulator:
    """File systems and data repository tasks over ``root``, importing from the emulated S3."""

    def __init__(
        self,
        root: Path,
        *,
        s3_client: S3Client,
        faults: ImportFaults | None = None,
        region: str = REGION,
        account: str = ACCOUNT_ID,
    ) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self._s3 = s3_client
        self._faults = faults
        self._region, self._account = region, account
        self._lock = threading.Lock()
        self._state_file = root / "fsx-state.json"
        self._file_systems: dict[str, dict[str, Any]] = {}
        self._tasks: dict[str, dict[str, Any]] = {}
        self._threads: list[threading.Thread] = []
        self._load()

    # -- persistence: the emulation's own records live next to the mirrored files
    def _load(self) -> None:
        if self._state_file.exists():
            state = json.loads(self._state_file.read_text(encoding="utf-8"))
            self._file_systems = state["FileSystems"]
            self._tasks = state["Tasks"]
            for task in self._tasks.values():
                if task["Lifecycle"] in RUNNING_LIFECYCLES:  # the process that ran it is gone
                    task.update(Lifecycle="FAILED", FailureDetails={"Message": "The task was interrupted."})

    def _save(self) -> None:
        tmp = self._state_file.with_suffix(".tmp")
        tmp.write_text(
            json.dumps({"FileSystems": self._file_systems, "Tasks": self._tasks}, default=str),
            encoding="utf-8",
        )
        tmp.replace(self._state_file)

    # -- file systems
    def create_file_system(self, **request: Any) -> dict[str, Any]:
        if request.get("FileSystemType") != "LUSTRE":
            raise _error(
                "BadRequest", "the embedded FSx emulates FSx for Lustre only (FileSystemType LUSTRE)"
            )
        lustre = dict(request.get("LustreConfiguration") or {})
        fs_id = "fs-" + secrets.token_hex(9)[:17]
        mount_name = secrets.token_hex(4)
        import_path = lustre.get("ImportPath")
        if import_path:
            _split_s3(import_path)
        file_system = {
            "OwnerId": self._account,
            "CreationTime": _now().isoformat(),
            "FileSystemId": fs_id,
            "FileSystemType": "LUSTRE",
            "Lifecycle": "AVAILABLE",
            "StorageCapacity": request.get("StorageCapacity", 1200),
            "StorageType": request.get("StorageType", "SSD"),
            "SubnetIds": request.get("SubnetIds", []),
            "DNSName": f"{fs_id}.fsx.{self._region}.amazonaws.com",
            "ResourceARN": f"arn:aws:fsx:{self._region}:{self._account}:file-system/{fs_id}",
            "Tags": request.get("Tags", []),
            "LustreConfiguration": {
                "DeploymentType": lustre.get("DeploymentType", "SCRATCH_2"),
                "MountName": mount_name,
                "DataRepositoryConfiguration": {
                    "Lifecycle": "AVAILABLE",
                    **({"ImportPath": import_path} if import_path else {}),
                    "AutoImportPolicy": lustre.get("AutoImportPolicy", "NONE"),
                },
            },
        }
        with self._lock:
            self._file_systems[fs_id] = file_system
            (self.root / fs_id).mkdir(parents=True, exist_ok=True)
            self._save()
        return {"FileSystem": _as_response(file_system)}

    def describe_file_systems(self, **request: Any) -> dict[str, Any]:
        ids = request.get("FileSystemIds") or list(self._file_systems)
        for fs_id in ids:
            self._file_system(fs_id)
        return {"FileSystems": [_as_response(self._file_systems[fs_id]) for fs_id in ids]}

    def _file_system(self, fs_id: str) -> dict[str, Any]:
        try:
            return self._file_systems[fs_id]
        except KeyError:
            raise _error("FileSystemNotFound", f"File system '{fs_id}' does not exist.") from None

    def mount_path(self, file_system_id: str, directory_path: str) -> Path:
        """The local directory a FileSystemDataSource ``DirectoryPath`` (``/<MountName>/...``) names."""
        mount_name = self._file_system(file_system_id)["LustreConfiguration"]["MountName"]
        parts = PurePosixPath(directory_path).parts
        if len(parts) < 2 or parts[0] != "/" or parts[1] != mount_name:
            raise _error(
                "BadRequest",
                f"DirectoryPath {directory_path!r} must start with /{mount_name} "
                f"(the MountName of {file_system_id})",
            )
        path = (self.root / file_system_id).joinpath(*parts[2:])
        if not path.resolve().is_relative_to((self.root / file_system_id).resolve()):
            raise _error("BadRequest", f"DirectoryPath {directory_path!r} leaves the file system")
        return path

    # -- data repository tasks
    def create_data_repository_task(self, **request: Any) -> dict[str, Any]:
        fs_id = request.get("FileSystemId", "")
        task_type = request.get("Type")
        if task_type != IMPORT_TASK:
            raise _error("BadRequest", f"the embedded FSx runs {IMPORT_TASK} tasks only, not {task_type!r}")
        report = request.get("Report")
        if not isinstance(report, dict) or "Enabled" not in report:
            raise _error("BadRequest", "Report is required: give {'Enabled': false} or a Path/Format/Scope")
        with self._lock:
            file_system = self._file_system(fs_id)
            if not _associations(file_system):
                raise _error(
                    "BadRequest",
                    f"file system {fs_id} has no linked data repository (ImportPath or a data repository "
                    "association)",
                )
            if report.get("Enabled"):
                _check_report(report, _associations(file_system))
            if any(
                t["FileSystemId"] == fs_id and t["Lifecycle"] in RUNNING_LIFECYCLES
                for t in self._tasks.values()
            ):
                raise _error(
                    "DataRepositoryTaskExecuting",
                    f"An existing data repository task is currently executing on file system {fs_id}.",
                )
            task_id = "task-" + secrets.token_hex(9)[:17]
            task = {
                "TaskId": task_id,
                "Lifecycle": "PENDING",
                "Type": task_type,
                "CreationTime": _now().isoformat(),
                "ResourceARN": f"arn:aws:fsx:{self._region}:{self._account}:task/{task_id}",
                "FileSystemId": fs_id,
                "Paths": list(request.get("Paths") or []),
                "Report": report,
                "Status": {
                    "TotalCount": 0,
                    "SucceededCount": 0,
                    "FailedCount": 0,
                    "LastUpdatedTime": _now().isoformat(),
                },
            }
            self._tasks[task_id] = task
            self._save()
        thread = threading.Thread(target=self._run_import, args=(task_id,), name=f"fsx-{task_id}")
        thread.start()
        self._threads.append(thread)  # once started: `wait` may run meanwhile and joins only these
        return {"DataRepositoryTask": _as_response(task)}

    def describe_data_repository_tasks(self, **request: Any) -> dict[str, Any]:
        ids = request.get("TaskIds")
        filters = {f["Name"]: set(f["Values"]) for f in request.get("Filters") or []}
        with self._lock:
            if ids:
                missing = [task_id for task_id in ids if task_id not in self._tasks]
                if missing:
                    raise _error(
                        "DataRepositoryTaskNotFound", f"The data repository task {missing[0]} was not found."
                    )
                tasks = [self._tasks[task_id] for task_id in ids]
            else:
                tasks = list(self._tasks.values())
            if "file-system-id" in filters:
                tasks = [t for t in tasks if t["FileSystemId"] in filters["file-system-id"]]
            if "task-lifecycle" in filters:
                tasks = [t for t in tasks if t["Lifecycle"] in filters["task-lifecycle"]]
            return {"DataRepositoryTasks": [_as_response(t) for t in tasks]}

    def wait(self, timeout: float = 60.0) -> None:
        """Join the task threads (for a clean shutdown and for tests)."""
        for thread in list(self._threads):
            thread.join(timeout)

    def _update(self, task_id: str, **changes: Any) -> None:
        with self._lock:
            task = self._tasks[task_id]
            status = changes.pop("Status", None)
            task.update(changes)
            if status:
                task["Status"].update(status, LastUpdatedTime=_now().isoformat())
            self._save()

    def _run_import(self, task_id: str) -> None:
        task = self._tasks[task_id]
        fs_id = task["FileSystemId"]
        associations = _associations(self._file_systems[fs_id])
        self._update(task_id, Lifecycle="EXECUTING", StartTime=_now().isoformat())
        failures: list[dict[str, str]] = []
        succeeded = 0
        try:
            if self._faults is not None and self._faults.import_task_fails(fs_id):
                raise _error(
                    "InternalServerError", "injected fault: the import from the data repository failed"
                )
            requested = list(task["Paths"]) or [f"/{fs_path}" for fs_path, _ in associations]
            for path in requested:
                resolved = _resolve_import_path(associations, path)
                if resolved is None:
                    failures.append(
                        {"Path": path, "Error": "no data repository association covers this path"}
                    )
                    continue
                bucket, prefix, rel = resolved
                listed = dict(self._list(bucket, prefix))
                self._update(task_id, Status={"TotalCount": task["Status"]["TotalCount"] + len(listed)})
                base = self.root / fs_id
                target_dir = base / rel if rel else base
                locals_: set[Path] = set()
                for key, etag in listed.items():
                    local = target_dir / key[len(prefix) :].lstrip("/") if prefix else base / key
                    locals_.add(local)
                    marker = local.with_name(f".{local.name}.etag")
                    try:
                        if not (local.exists() and marker.exists() and marker.read_text() == etag):
                            local.parent.mkdir(parents=True, exist_ok=True)
                            get_file(self._s3, bucket, key, local)
                            marker.write_text(etag)
                        succeeded += 1
                    except (ClientError, OSError) as exc:
                        failures.append({"Path": key, "Error": str(exc)})
                self._remove_deleted(target_dir, locals_)
                self._update(task_id, Status={"SucceededCount": succeeded, "FailedCount": len(failures)})
        except ClientError as exc:
            failures.append({"Path": ",".join(task["Paths"]), "Error": exc.response["Error"]["Message"]})
            self._finish(task_id, "FAILED", failures, exc.response["Error"]["Message"])
            return
        if failures:
            self._finish(task_id, "FAILED", failures, f"{len(failures)} path(s) or file(s) failed to import")
        else:
            self._finish(task_id, "SUCCEEDED", failures, None)

    def create_data_repository_association(self, **request: Any) -> dict[str, Any]:
        """Link a file system path to an S3 prefix (what AWS::FSx::DataRepositoryAssociation declares)."""
        fs_id = request.get("FileSystemId", "")
        fs_path = "/" + str(request.get("FileSystemPath", "/")).strip("/")
        repository = str(request.get("DataRepositoryPath", ""))
        _split_s3(repository)
        with self._lock:
            file_system = self._file_system(fs_id)
            association_id = "dra-" + secrets.token_hex(9)[:17]
            arn = f"arn:aws:fsx:{self._region}:{self._account}:association/{fs_id}/{association_id}"
            association = {
                "AssociationId": association_id,
                "ResourceARN": arn,
                "FileSystemId": fs_id,
                "Lifecycle": "AVAILABLE",
                "FileSystemPath": fs_path,
                "DataRepositoryPath": repository,
                "BatchImportMetaDataOnCreate": bool(request.get("BatchImportMetaDataOnCreate", False)),
                "S3": request.get("S3", {}),
                "CreationTime": _now().isoformat(),
            }
            file_system.setdefault("DataRepositoryAssociations", []).append(association)
            self._save()
        return {"Association": _as_response(association)}

    def _finish(
        self, task_id: str, lifecycle: str, failures: list[dict[str, str]], message: str | None
    ) -> None:
        task = self._tasks[task_id]
        report = task["Report"]
        if report.get("Enabled"):
            bucket, prefix = _split_s3(report["Path"])
            key = "/".join(p for p in (prefix, task_id, REPORT_FILE) if p)
            buffer = io.StringIO()
            writer = csv.writer(buffer)
            for failure in failures:  # REPORT_CSV_20191124: path, status, error
                writer.writerow([failure["Path"], "FAILED", failure["Error"]])
            try:
                self._s3.put_object(Bucket=bucket, Key=key, Body=buffer.getvalue().encode())
            except ClientError as exc:
                message = (message or "") + f" (completion report not written: {exc})"
        changes: dict[str, Any] = {"Lifecycle": lifecycle, "EndTime": _now().isoformat(), "Report": report}
        if message:
            changes["FailureDetails"] = {"Message": message}
        self._update(task_id, **changes)

    def _list(self, bucket: str, prefix: str) -> Iterator[tuple[str, str]]:
        paginator = self._s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket, Prefix=f"{prefix}/" if prefix else ""):
            for obj in page.get("Contents", []):
                if not obj["Key"].endswith("/"):
                    yield obj["Key"], obj.get("ETag", "")

    @staticmethod
    def _remove_deleted(directory: Path, keep: set[Path]) -> None:
        """Metadata import also drops files whose objects left the repository (the mirror, not S3)."""
        if not directory.is_dir():
            return
        for path in sorted(directory.rglob("*"), reverse=True):
            if path.is_file() and not path.name.startswith(".") and path not in keep:
                path.unlink()
                path.with_name(f".{path.name}.etag").unlink(missing_ok=True)
            elif path.is_dir() and not any(path.iterdir()):
                shutil.rmtree(path)


def _check_report(report: dict[str, Any], associations: list[tuple[str, str]]) -> None:
    """FSx writes a task's completion report into the file system's linked data repository only: a
    Report.Path elsewhere (another bucket, another prefix) is refused, as CreateDataRepositoryTask does."""
    path = str(report.get("Path") or "")
    if not path or "Format" not in report or "Scope" not in report:
        raise _error("BadRequest", "an enabled Report needs Path, Format and Scope")
    _split_s3(path)
    repositories = [uri for _, uri in associations if uri.startswith("s3://")]
    if not any((path.rstrip("/") + "/").startswith(uri.rstrip("/") + "/") for uri in repositories):
        raise _error(
            "BadRequest",
            f"The Report Path {path} is not in a data repository linked to the file system "
            f"({', '.join(repositories)}); FSx writes completion reports inside the linked repository only.",
        )


def _associations(file_system: dict[str, Any]) -> list[tuple[str, str]]:
    """(file system path without slashes, s3 URI) pairs: the legacy ImportPath links the root."""
    pairs = [
        (str(a["FileSystemPath"]).strip("/"), str(a["DataRepositoryPath"]))
        for a in file_system.get("DataRepositoryAssociations", [])
    ]
    import_path = file_system["LustreConfiguration"]["DataRepositoryConfiguration"].get("ImportPath")
    if import_path:
        pairs.append(("", str(import_path)))
    return pairs


def _resolve_import_path(associations: list[tuple[str, str]], path: str) -> tuple[str, str, str] | None:
    """(bucket, key prefix, file system path) of an import task path.

    FSx takes import paths as S3 URIs (``s3://bucket/prefix/``); a file system path is accepted too."""
    if not path.startswith("s3://"):
        rel = path.strip("/")
        found = _repository_prefix(associations, rel)
        return None if found is None else (*found, rel)
    bucket, key_prefix = _split_s3(path)
    best: tuple[int, str, str] | None = None
    for fs_path, uri in associations:
        repo_bucket, repo_prefix = _split_s3(uri)
        if repo_bucket != bucket:
            continue
        if repo_prefix and not (key_prefix == repo_prefix or key_prefix.startswith(repo_prefix + "/")):
            continue
        if best is None or len(repo_prefix) > best[0]:
            rest = key_prefix[len(repo_prefix) :].strip("/")
            best = (len(repo_prefix), key_prefix, "/".join(p for p in (fs_path, rest) if p))
    return None if best is None else (bucket, best[1], best[2])


def _repository_prefix(associations: list[tuple[str, str]], rel: str) -> tuple[str, str] | None:
    """(bucket, key prefix) that the file system path ``rel`` mirrors, through the longest association."""
    matches = [
        (fs_path, uri)
        for fs_path, uri in associations
        if not fs_path or rel == fs_path or rel.startswith(fs_path + "/")
    ]
    if not matches:
        return None
    fs_path, uri = max(matches, key=lambda m: len(m[0]))
    bucket, prefix = _split_s3(uri)
    rest = rel[len(fs_path) :].strip("/")
    return bucket, "/".join(p for p in (prefix, rest) if p)


def _as_response(record: dict[str, Any]) -> dict[str, Any]:
    """Records keep ISO timestamps (JSON on disk); boto3 responses carry datetimes."""
    out = json.loads(json.dumps(record))
    for key in ("CreationTime", "StartTime", "EndTime"):
        if key in out:
            out[key] = datetime.datetime.fromisoformat(out[key])
    if "Status" in out and "LastUpdatedTime" in out["Status"]:
        out["Status"]["LastUpdatedTime"] = datetime.datetime.fromisoformat(out["Status"]["LastUpdatedTime"])
    return dict(out)
