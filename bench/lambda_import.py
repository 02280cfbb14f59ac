"""Lambda cold-import time: each handler module of template.yaml imported in a fresh interpreter.

A Lambda cold start pays the import of its handler module (Powertools, boto3, the X-Ray SDK when
Tracing is Active) before the first event. Each module is timed in its own new process, rounds
interleaved, median reported, beside `import boto3` (what every handler pays anyway) measured in the
same rounds. Target (issue 5): <= 300 ms per handler on a Lambda-sized CPU.

The interpreter is set up as Lambda's: the runtime's reserved variables (LAMBDA_TASK_ROOT and
friends: with them the X-Ray SDK takes its Lambda path, a local sampler, instead of building an X-Ray
client at import), and on sys.path only the handlers' code and what the deployment package holds:
functions/requirements.txt installed for this interpreter into build/lambda-bench/ (once per change
of that file), without site processing (`-S`), so nothing of the development virtualenv is seen.

    .venv/bin/python bench/lambda_import.py [--rounds 7] [--append BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import results  # noqa: E402

TEMPLATE = ROOT / "template.yaml"
REQUIREMENTS = ROOT / "functions" / "requirements.txt"
PACKAGE_ROOT = ROOT / "build" / "lambda-bench"
TARGET_MS = 300.0
BASELINE = "boto3"
_TIMER = (
    "import time, importlib; t = time.perf_counter(); importlib.import_module({module!r}); "
    "print((time.perf_counter() - t) * 1000)"
)


class _Loader(yaml.SafeLoader):
    """Reads CloudFormation short-form tags (!Ref, !Sub, ...) as plain values."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def handler_modules(template: Path = TEMPLATE) -> list[str]:
    """The module of every function's Handler in the template, in template order."""
    document = yaml.load(template.read_text(encoding="utf-8"), Loader=_Loader)
    modules = []
    for resource in document["Resources"].values():
        if resource.get("Type") == "AWS::Serverless::Function":
            modules.append(resource["Properties"]["Handler"].rsplit(".", 1)[0])
    return modules


def lambda_package(requirements: Path = REQUIREMENTS) -> Path:
    """functions/requirements.txt installed for this interpreter, as `sam build` puts it in the package."""
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()[:16]
    target = PACKAGE_ROOT / digest
    if not (target / ".complete").exists():
        shutil.rmtree(PACKAGE_ROOT, ignore_errors=True)
        pip = [sys.executable, "-m", "pip", "install", "-qq", "--disable-pip-version-check"]
        subprocess.run([*pip, "-r", str(requirements), "--target", str(target)], check=True)
        (target / ".complete").touch()
    return target


def lambda_environment(template: Path = TEMPLATE) -> dict[str, str]:
    """The literal Globals environment (Powertools settings, tracing on as deployed) and the variables
    Lambda's Python runtime sets in every function."""
    document = yaml.load(template.read_text(encoding="utf-8"), Loader=_Loader)
    function = document["Globals"]["Function"]
    variables = function["Environment"]["Variables"]
    env = {key: str(value) for key, value in variables.items() if isinstance(value, str | int)}
    task_root = ROOT / "functions"
    env.update(
        PYTHONPATH=os.pathsep.join([str(task_root), str(lambda_package())]),
        PATH=os.environ.get("PATH", ""),
        AWS_DEFAULT_REGION="us-east-1",
        AWS_REGION="us-east-1",
        LAMBDA_TASK_ROOT=str(task_root),
        AWS_EXECUTION_ENV=f"AWS_Lambda_{function['Runtime']}",
        AWS_LAMBDA_FUNCTION_NAME="retrain-bench",
        AWS_LAMBDA_FUNCTION_MEMORY_SIZE=str(function.get("MemorySize", 128)),
    )
    return env


def time_import(module: str, env: dict[str, str]) -> float:
    result = subprocess.run(
        [sys.executable, "-S", "-c", _TIMER.format(module=module)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(result.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--append", type=Path, help="append the result to this markdown file")
    args = parser.parse_args()

    env = lambda_environment()
    modules = [BASELINE, *dict.fromkeys(handler_modules())]
    samples: dict[str, list[float]] = {module: [] for module in modules}
    load_before = os.getloadavg()[0]
    for _ in range(args.rounds):
        for module in modules:
            samples[module].append(time_import(module, env))
    load_after = os.getloadavg()[0]

    baseline = statistics.median(samples[BASELINE])
    rows = ["| module | median ms | vs `import boto3` | within 300 ms |", "| --- | ---: | ---: | --- |"]
    for module in modules:
        median = statistics.median(samples[module])
        within = "yes" if median <= TARGET_MS else "no"
        rows.append(f"| `{module}` | {median:.0f} | {median / baseline:.2f}x | {within} |")
    section = "\n".join(
        [
            f"## Lambda cold import ({results.when()})",
            "",
            results.machine_line(load_before, load_after),
            f"Each figure: median of {args.rounds} fresh interpreters, modules interleaved per round;",
            "the template's Globals environment (Powertools settings, tracing on as deployed) and Lambda's",
            "reserved variables (LAMBDA_TASK_ROOT, ...); on sys.path the handlers and",
            "functions/requirements.txt installed alone (build/lambda-bench/), `python -S`: what the",
            "deployment package holds.",
            "Target: <= 300 ms per handler.",
            "",
            *rows,
            "",
        ]
    )
    results.publish(section, args.append)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
