"""A newcomer's first contact: `retrain local up`, an upload of their own photos, the automatic run.

What the README shows a newcomer, timed as they would live it, each step a `retrain` command in a fresh
directory (a fresh state): `retrain local up` (the background stack, with `retrain demo --images`'
parameters), N photos in L labels written as JPEGs (crops of the photographs scikit-image ships:
retrain.demo.data.write_photos, --size pixels square), `retrain upload DIR --dataset photos`, then
`retrain runs --json` every 2 s until the run the uploads started has ended, its phases from Step
Functions' history (retrain.report.timing, as its report's table), and `retrain local down`. The run's top-1
is the gate's: the registered model on the run's held-out split.

    .venv/bin/python bench/first_contact.py [--repeat 3] [--per-class 30 --labels cat,coffee] [--wrong 0.15]
    add --append BENCHMARKS.md to record the result
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.results import machine_line, publish, when
from controller import names, runs
from retrain import local
from retrain.demo import data as demo_data
from retrain.report import timing

RETRAIN = Path(sys.executable).with_name("retrain")
DATASET = "photos"
ENDED = ("SUCCEEDED", "REJECTED", "FAILED", "ABORTED", "TIMED_OUT")
POLL_SECONDS = 2.0


@dataclass
class Contact:
    """One first contact's wall times (s) by step, the run's phases and its outcome."""

    steps: dict[str, float] = field(default_factory=dict)
    phases: list[timing.Phase] = field(default_factory=list)
    status: str = ""
    top1: float | None = None
    run_id: str = ""
    gate: str = ""  # the gate's reason, as the run's report gives it

    @property
    def total(self) -> float:
        return sum(self.steps.values())


def retrain(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        [str(RETRAIN), *args], cwd=cwd, capture_output=True, text=True, timeout=1800, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"retrain {' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def run_phases(cwd: Path, run_id: str) -> list[timing.Phase]:
    """The run's phases, read from the background stack `retrain local up` started in `cwd`."""
    deployment = local.background(cwd / local.DEFAULT_STATE_DIR)
    if deployment is None:
        raise RuntimeError(f"no stack of `retrain local up` runs in {cwd}")
    table = deployment.output(names.STACK_OUTPUTS["runs_table"])
    record = runs.get_run(DATASET, run_id, table_name=table, client=deployment.client("dynamodb"))
    if record is None:
        raise RuntimeError(f"run {run_id} has no record in {table}")
    return timing.run_phases(deployment.client("stepfunctions"), record["execution_arn"])


def first_contact(labels: list[str], per_class: int, size: int, wrong: float = 0.0) -> Contact:
    contact = Contact()
    with tempfile.TemporaryDirectory(prefix="retrain-first-contact-") as scratch:
        cwd = Path(scratch)
        photos = cwd / "my-photos"
        began = time.monotonic()

        def lap(name: str) -> None:
            nonlocal began
            now = time.monotonic()
            contact.steps[name] = now - began
            began = now

        retrain("local", "up", cwd=cwd)
        lap("retrain local up")
        try:
            demo_data.write_photos(photos, per_class=per_class, size=size, classes=labels)
            demo_data.mislabel(photos, wrong)
            lap("write the photos")
            retrain("upload", str(photos), "--dataset", DATASET, cwd=cwd)
            lap("retrain upload")
            run: dict[str, object] = {}
            while not run:
                found = json.loads(retrain("runs", "--json", "--dataset", DATASET, cwd=cwd) or "[]")
                run = found[0] if found else {}
                if not run:
                    time.sleep(POLL_SECONDS)
            lap("ingest, quiet period, dispatch")
            while run.get("status") not in ENDED:
                time.sleep(POLL_SECONDS)
                run = json.loads(retrain("runs", "--json", "--dataset", DATASET, cwd=cwd))[0]
            lap("the run")
            contact.run_id, contact.status = str(run["run_id"]), str(run["status"])
            objective = run.get("objective")
            contact.top1 = float(objective) if isinstance(objective, int | float) else None
            contact.phases = run_phases(cwd, contact.run_id)
            report = json.loads(retrain("report", contact.run_id, "--dataset", DATASET, "--json", cwd=cwd))
            contact.gate = str(report["gate"]["reason"])
        finally:
            retrain("local", "down", cwd=cwd)
    return contact


def section(contacts: list[Contact], args: argparse.Namespace, load: tuple[float, float]) -> str:
    steps = list(contacts[0].steps)
    lines = [
        f"## A newcomer's first contact: `local up`, {args.per_class * len(args.labels)} photos in "
        f"{len(args.labels)} labels{f', {args.wrong:.0%} of them labelled wrong' if args.wrong else ''}, "
        f"the automatic run ({when()})",
        "",
        machine_line(*load),
        "",
        "| step | " + " | ".join(f"contact {i + 1} (s)" for i in range(len(contacts))) + " |",
        "| --- |" + " ---: |" * len(contacts),
    ]
    for step in steps:
        lines.append(f"| {step} | " + " | ".join(f"{c.steps.get(step, 0):.0f}" for c in contacts) + " |")
    lines.append("| **total** | " + " | ".join(f"**{c.total:.0f}**" for c in contacts) + " |")
    lines.append(
        "| run: status, top-1 | "
        + " | ".join(f"{c.status}, {'-' if c.top1 is None else f'{c.top1:.3f}'}" for c in contacts)
        + " |"
    )
    lines += ["", *(f"Contact {i + 1}'s gate: {c.gate}." for i, c in enumerate(contacts))]
    lines += ["", "The run's phases (Step Functions' history, as its report's table):", ""]
    seconds = [{p.name: p.seconds for p in c.phases} for c in contacts]
    lines.append("| phase | " + " | ".join(f"contact {i + 1} (s)" for i in range(len(contacts))) + " |")
    lines.append("| --- |" + " ---: |" * len(contacts))
    for phase in contacts[0].phases:
        cells = (f"{s[phase.name]:.0f}" if phase.name in s else "-" for s in seconds)
        lines.append(f"| {phase.name} | " + " | ".join(cells) + " |")
    lines.append("| **total** | " + " | ".join(f"**{sum(s.values()):.0f}**" for s in seconds) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--per-class", type=int, default=30)
    parser.add_argument("--labels", type=lambda s: s.split(","), default=["cat", "coffee"])
    parser.add_argument("--size", type=int, default=demo_data.PHOTO_SIZE, help="pixels of each photo's side")
    parser.add_argument(
        "--wrong",
        type=float,
        default=0.0,
        help="share of the photos filed under a wrong label, drawn at random",
    )
    parser.add_argument("--append", type=Path, default=None, help="append the result to this markdown file")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    contacts = []
    for number in range(args.repeat):
        contact = first_contact(args.labels, args.per_class, args.size, args.wrong)
        print(f"contact {number + 1}: {contact.total:.0f} s, {contact.status}, top-1 {contact.top1}")
        contacts.append(contact)
    publish(section(contacts, args, (load_before, os.getloadavg()[0])), args.append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
