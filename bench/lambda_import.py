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
from typing import Any

import yaml

from bench import results

ROOT = Path(__file__).resolve().parent.parent

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


def _tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    """!Ref NAME as {"Ref": NAME} (a function's Layers), any other short form as None."""
    if suffix == "Ref" and isinstance(node, yaml.ScalarNode):
        return {"Ref": loader.construct_scalar(node)}
    return None


_Loader.add_multi_constructor("!", _tag)


def handler_modules(template: Path = TEMPLATE) -> list[str]:
    """The module of every function's Handler in the template, in template order."""
    return list(handler_layers(template))


def handler_layers(template: Path = TEMPLATE) -> dict[str, list[Path]]:
    """Each handler module and the requirements files of the layers its function adds to the package
    (a layer built from requirements.txt, as MlflowLayer; the contract layer is the source tree's)."""
    document = yaml.load(template.read_text(encoding="utf-8"), Loader=_Loader)
    resources = document["Resources"]
    modules: dict[str, list[Path]] = {}
    for resource in resources.values():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        layers = []
        for layer in resource["Properties"].get("Layers") or []:
            source = resources.get((layer or {}).get("Ref", ""), {}).get("Properties", {}).get("ContentUri")
            if source and (ROOT / source / "requirements.txt").is_file():
                layers.append(ROOT / source / "requirements.txt")
        modules[resource["Properties"]["Handler"].rsplit(".", 1)[0]] = layers
    return modules


def lambda_package(requirements: Path = REQUIREMENTS) -> Path:
    """`requirements` installed for this interpreter, as `sam build` puts it in a package or a layer."""
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()[:16]
    target = PACKAGE_ROOT / f"{requirements.parent.name}-{digest}"
    if not (target / ".complete").exists():
        for stale in PACKAGE_ROOT.glob(f"{requirements.parent.name}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        pip = [sys.executable, "-m", "pip", "install", "-qq", "--disable-pip-version-check"]
        subprocess.run([*pip, "-r", str(requirements), "--target", str(target)], check=True)
        (target / ".complete").touch()
    return target


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def lambda_environment(template: Path = TEMPLATE) -> dict[str, str]:
    """The literal Globals environment (Powertools settings, tracing on as deployed) and the variables
    Lambda's Python runtime sets in every function."""
    document = yaml.load(template.read_text(encoding="utf-8"), Loader=_Loader)
    function = document["Globals"]["Function"]
    variables = function["Environment"]["Variables"]
    env = {key: str(value) for key, value in variables.items() if isinstance(value, str | int)}
    task_root = ROOT / "functions"
    env.update(
        # the code, what requirements.txt installs, then the contract layer (its source: it has no
        # requirements), as Lambda orders /var/task before /opt/python
        PYTHONPATH=os.pathsep.join([str(task_root), str(lambda_package()), str(ROOT / "contract")]),
        PATH=os.environ.get("PATH", ""),
        AWS_DEFAULT_REGION="us-east-1",
        AWS_REGION="us-east-1",
        LAMBDA_TASK_ROOT=str(task_root),
        AWS_EXECUTION_ENV=f"AWS_Lambda_{function['Runtime']}",
        AWS_LAMBDA_FUNCTION_NAME="retrain-bench",
        AWS_LAMBDA_FUNCTION_MEMORY_SIZE=str(function.get("MemorySize", 128)),
    )
    return env


def with_layers(env: dict[str, str], layers: list[Path]) -> dict[str, str]:
    """The environment of a function with these layers: their packages after the function's own (Lambda
    puts /opt/python after /var/task)."""
    if not layers:
        return env
    paths = [env["PYTHONPATH"], *(str(lambda_package(layer)) for layer in layers)]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


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
    layers = {BASELINE: [], **handler_layers()}
    modules = list(layers)
    environments = {module: with_layers(env, layers[module]) for module in modules}
    package = size_mb(lambda_package())
    sizes = {
        module: package + sum(size_mb(lambda_package(layer)) for layer in layers[module])
        for module in modules
    }
    samples: dict[str, list[float]] = {module: [] for module in modules}
    load_before = os.getloadavg()[0]
    for _ in range(args.rounds):
        for module in modules:
            samples[module].append(time_import(module, environments[module]))
    load_after = os.getloadavg()[0]

    baseline = statistics.median(samples[BASELINE])
    rows = [
        "| module | median ms | vs `import boto3` | within 300 ms | package + layers MB (limit 250) |",
        "| --- | ---: | ---: | --- | ---: |",
    ]
    for module in modules:
        median = statistics.median(samples[module])
        within = "yes" if median <= TARGET_MS else "no"
        rows.append(
            f"| `{module}` | {median:.0f} | {median / baseline:.2f}x | {within} | {sizes[module]:.1f} |"
        )
    section = "\n".join(
        [
            f"## Lambda cold import ({results.when()})",
            "",
            results.machine_line(load_before, load_after),
            f"Each figure: median of {args.rounds} fresh interpreters, modules interleaved per round;",
            "the template's Globals environment (Powertools settings, tracing on as deployed) and Lambda's",
            "reserved variables (LAMBDA_TASK_ROOT, ...); on sys.path the handlers and",
            "functions/requirements.txt installed alone (build/lambda-bench/), and a function's layers'",
            "requirements after it, `python -S`: what the deployment package and its layers hold.",
            "Size: the installed package and layers, unzipped (Lambda's limit: 250 MB).",
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
