"""A job's container as the embedded SageMaker starts it: the image from its Dockerfile, its command as
PID 1 in namespaces of its own, only its own Python packages, no network when isolated."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from retrain.embedded.sagemaker.container import Container, job_spec
from retrain.embedded.sagemaker.image import ContainerImage, DockerIgnore, ImageError, build_image
from retrain_contract import container as contract
from retrain_contract import serving


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> ContainerImage:
    """The project's training image (in this module, in place of conftest's stand-in programs' image)."""
    return build_image(tmp_path_factory.mktemp("image") / "root")


def run(
    image: ContainerImage,
    tmp_path: Path,
    code: str,
    *,
    isolated: bool = True,
    env: dict[str, str] | None = None,
) -> tuple[int, str, Path]:
    """Run `python -c code` in a container of the image; its status, its output and its /opt/ml."""
    opt_ml = tmp_path / "opt" / "ml"
    opt_ml.mkdir(parents=True, exist_ok=True)
    image.install(opt_ml)
    spec = job_spec(
        image, ["python", "-c", textwrap.dedent(code)], opt_ml, network_isolation=isolated, layers=[env or {}]
    )
    container = Container(spec, tmp_path / "container")
    try:
        assert container.process.stdout is not None
        output = container.process.stdout.read()
        return container.wait(60), output, opt_ml
    finally:
        container.cleanup()


def test_the_image_code_directory_holds_its_code_and_no_requirements_file(
    image: ContainerImage,
) -> None:
    # GIVEN the project's Dockerfile WHEN it is laid out as the image THEN /opt/ml/code holds the entry
    # scripts, the training package and the contract, and nothing the toolkit would act on or that is not code
    names = {path.name for path in image.code_dir.iterdir()}
    assert names == {
        contract.PROGRAM,
        contract.EVALUATE_PROGRAM,
        contract.RULE_CHECK_PROGRAM,
        contract.FREEZE_PROGRAM,
        serving.PROGRAM,  # code/inference.py of every model.tar.gz
        "retrain_training",
        "retrain_contract",
    }
    assert not list(image.code_dir.rglob("requirements*.txt"))
    assert not list(image.code_dir.rglob("__pycache__"))


def test_the_image_starts_its_entrypoint_and_keeps_the_base_images_working_directory(
    image: ContainerImage,
) -> None:
    # GIVEN the project's image THEN SageMaker's `train` runs the PID 1 entry point, the toolkit runs
    # SAGEMAKER_PROGRAM itself, and no WORKDIR replaces the base image's (its entry script needs its own)
    assert image.command(["train"]) == ["python", "-m", "retrain_training.entrypoint", "train"]
    assert image.env[contract.PROGRAM_ENV] == contract.PROGRAM
    assert image.env["SAGEMAKER_TRAINING_MODULE"] == ""
    assert image.workdir == "/"


def test_the_command_is_pid_1_with_the_jobs_tree_as_opt_ml(image: ContainerImage, tmp_path: Path) -> None:
    # GIVEN a container WHEN its command reports where it is THEN it is PID 1, /opt holds only /opt/ml
    # (the job's tree, the image's code in it) and algo-1 is this container
    status, output, opt_ml = run(
        image,
        tmp_path,
        """
        import json, os, socket
        open("/opt/ml/marker", "w").write("x")
        print(json.dumps({"pid": os.getpid(), "opt": sorted(os.listdir("/opt")),
                          "code": sorted(os.listdir("/opt/ml/code")), "cwd": os.getcwd(),
                          "host": socket.gethostbyname("algo-1")}))
        """,
    )
    assert status == 0, output
    seen = json.loads(output.strip().splitlines()[-1])
    assert seen["pid"] == 1
    assert seen["opt"] == ["ml"]
    assert contract.PROGRAM in seen["code"]
    assert seen["cwd"] == "/"
    assert seen["host"] == "127.0.0.1"
    assert (opt_ml / "marker").read_text() == "x"


def test_the_environment_is_the_images_and_the_jobs_not_this_machines(
    image: ContainerImage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a variable of this machine's that the image does not set
    monkeypatch.setenv("RETRAIN_HOST_ONLY", "leak")

    # WHEN the container prints its environment
    status, output, _ = run(
        image,
        tmp_path,
        "import json, os; print(json.dumps(dict(os.environ)))",
        env={"TRAINING_JOB_NAME": "job-1"},
    )

    # THEN it holds the image's ENV and the job's, not this machine's
    assert status == 0, output
    environment = json.loads(output.strip().splitlines()[-1])
    assert "RETRAIN_HOST_ONLY" not in environment
    assert "VIRTUAL_ENV" not in environment and "AWS_ENDPOINT_URL" not in environment
    assert environment["PYTHONPATH"] == "/opt/ml/code"
    assert environment["TRAINING_JOB_NAME"] == "job-1"
    assert environment["PATH"].split(os.pathsep)[0] == str(image.interpreter.parent)


def test_only_the_images_python_packages_import(image: ContainerImage, tmp_path: Path) -> None:
    # GIVEN the development environment, which has the project and its test tools installed
    # WHEN a container imports the image's packages and those others
    status, output, _ = run(
        image,
        tmp_path,
        """
        import importlib.util, json
        names = ["torch", "smdebug", "sagemaker_training", "nvidia.dali", "PIL",
                 "retrain", "controller", "moto", "pytest", "mypy"]
        print(json.dumps({n: importlib.util.find_spec(n.split(".")[0]) is not None for n in names}))
        """,
    )

    # THEN only what training_image/requirements.txt installs is there
    assert status == 0, output
    found = json.loads(output.strip().splitlines()[-1])
    assert found == {
        "torch": True,
        "smdebug": True,
        "sagemaker_training": True,
        "nvidia.dali": True,
        "PIL": True,
        "retrain": False,
        "controller": False,
        "moto": False,
        "pytest": False,
        "mypy": False,
    }


def test_what_a_container_writes_into_its_python_stays_in_the_container(
    image: ContainerImage, tmp_path: Path
) -> None:
    # GIVEN a container that writes into its interpreter's site-packages (as pip install would)
    status, output, _ = run(
        image,
        tmp_path,
        """
        import sysconfig
        target = sysconfig.get_paths()["purelib"] + "/retrain_written_in_a_container.py"
        open(target, "w").write("x = 1")
        import torch, pathlib
        marker = pathlib.Path(torch.__file__).parent / "retrain_written_in_a_container.txt"
        marker.write_text("x")
        print(target)
        """,
    )
    assert status == 0, output

    # THEN neither the image's environment nor the installed packages it links to changed here
    assert not Path(output.strip().splitlines()[-1]).exists()
    import torch

    assert not (Path(torch.__file__).parent / "retrain_written_in_a_container.txt").exists()


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP server on this machine's loopback."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(30)
    port: int = server.getsockname()[1]

    def accept() -> None:
        try:
            connection, _ = server.accept()
            connection.close()
        except OSError:
            pass

    threading.Thread(target=accept, daemon=True).start()
    yield port
    server.close()


CONNECT = """
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=5).close()
    print("reached")
except OSError as error:
    print("refused", error)
try:
    socket.getaddrinfo("pypi.org", 443)
    print("resolved")
except OSError as error:
    print("unresolved", error)
inside = socket.create_server(("127.0.0.1", 0))
socket.create_connection(inside.getsockname(), timeout=5).close()
print("loopback")
"""


def test_an_isolated_container_has_loopback_and_no_other_network(
    image: ContainerImage, tmp_path: Path, listener: int
) -> None:
    # GIVEN a server on this machine WHEN a container with network isolation tries it and a name
    status, output, _ = run(image, tmp_path, CONNECT.format(port=listener), isolated=True)

    # THEN neither is reachable, but its own loopback works
    assert status == 0, output
    lines = output.split("\n")
    assert any(line.startswith("refused") for line in lines), output
    assert any(line.startswith("unresolved") for line in lines), output
    assert "loopback" in lines


def test_a_container_without_isolation_shares_this_machines_network(
    image: ContainerImage, tmp_path: Path, listener: int
) -> None:
    status, output, _ = run(image, tmp_path, CONNECT.format(port=listener), isolated=False)
    assert status == 0, output
    assert "reached" in output.split("\n")


TWO_PROCESSES = """
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", '''
import signal, time
signal.signal(signal.SIGTERM, lambda *_: (open("/opt/ml/child-sigterm", "w").close()))
open("/opt/ml/child-ready", "w").close()
time.sleep(60)
'''])
def stop(*_):
    open("/opt/ml/pid1-sigterm", "w").close()
    time.sleep(0.5)
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
time.sleep(60)
"""


@contextmanager
def started(image: ContainerImage, tmp_path: Path, code: str, ready: str) -> Iterator[tuple[Container, Path]]:
    """A container of the image running `python -c code`, once it created /opt/ml/<ready>."""
    opt_ml = tmp_path / "opt" / "ml"
    opt_ml.mkdir(parents=True)
    spec = job_spec(image, ["python", "-c", code], opt_ml, network_isolation=True)
    container = Container(spec, tmp_path / "container")
    try:
        deadline = time.time() + 30
        while not (opt_ml / ready).exists() and time.time() < deadline:
            time.sleep(0.05)
        assert (opt_ml / ready).exists(), "the container never got ready"
        yield container, opt_ml
    finally:
        if container.poll() is None:
            container.kill()
        container.cleanup()


def test_a_stop_reaches_the_first_process_only_and_its_exit_ends_the_container(
    image: ContainerImage, tmp_path: Path
) -> None:
    # GIVEN a container whose first process started a child; both handle SIGTERM
    with started(image, tmp_path, TWO_PROCESSES, "child-ready") as (container, opt_ml):
        # WHEN it is stopped as SageMaker stops a container
        container.stop(grace_seconds=10)

        # THEN the first process got SIGTERM, its child did not, and its exit ended the container
        assert (opt_ml / "pid1-sigterm").exists()
        assert not (opt_ml / "child-sigterm").exists()
        assert container.returncode == 143


def test_a_first_process_that_ignores_sigterm_is_killed_after_the_grace(
    image: ContainerImage, tmp_path: Path
) -> None:
    # GIVEN a first process with no SIGTERM handler (a PID 1 ignores what it does not handle)
    code = "import time; open('/opt/ml/up', 'w').close(); time.sleep(60)"
    with started(image, tmp_path, code, "up") as (container, _):
        # WHEN it is stopped THEN SIGTERM does nothing and SIGKILL ends it after the grace
        container.stop(grace_seconds=1.0)
        assert container.returncode == -signal.SIGKILL


def test_dockerignore_patterns_decide_by_the_last_match() -> None:
    # GIVEN the repository's kind of .dockerignore: everything out, two folders back in, caches out
    ignore = DockerIgnore.parse(["# comment", "*", "!training_image/", "**/__pycache__", "!keep/**/cache"])

    # THEN the last pattern that matches a path or one of its folders decides
    assert ignore.excludes("README.md")
    assert ignore.excludes("tests/unit/x.py")
    assert not ignore.excludes("training_image/train.py")
    assert ignore.excludes("training_image/retrain_training/__pycache__/x.pyc")
    assert not ignore.excludes("keep/a/b/cache/x")
    assert ignore.excludes("keep/a/b/other")


def test_a_dockerfile_the_stack_cannot_lay_out_is_refused_with_its_line(tmp_path: Path) -> None:
    # GIVEN Dockerfiles with ADD and a multi-stage COPY
    for body, message in [
        ("FROM scratch\nADD a.tar /opt/ml/code/\n", "Dockerfile:2: ADD is not supported"),
        ("FROM scratch\nCOPY --from=build /x /opt/ml/code/\n", "Dockerfile:2: COPY --from"),
        ("FROM scratch\nCOPY missing/ /opt/ml/code/\n", "Dockerfile:2: COPY missing/ matches nothing"),
    ]:
        dockerfile = tmp_path / "Dockerfile"
        dockerfile.write_text(body)
        # WHEN it is read THEN the error names the file, the line and what to do
        with pytest.raises(ImageError, match=message):
            build_image(tmp_path / "root", dockerfile=dockerfile, context=tmp_path)


def test_the_python_standing_in_for_the_image_is_checked_like_the_images(
    image: ContainerImage,
) -> None:
    # GIVEN the environment built from training_image/requirements.txt WHEN pip checks it THEN its
    # requirements hold among the packages it has
    import subprocess

    checked = subprocess.run(
        [str(image.interpreter), "-m", "pip", "check"], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert Path(sys.prefix).resolve() in {path.resolve() for path in image.environment}
