"""`report.md` and its PNGs for one run, from a `RunFacts` (no AWS calls here)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from controller import names, notes
from retrain.report import charts, timing
from retrain.report.facts import RunFacts
from retrain.report.pricing import PRICE_DATE, PRICE_REGION, PRICE_SOURCE, job_cost, spot_savings_pct
from retrain_contract import container
from retrain_contract import rules as rule_names

log = logging.getLogger(__name__)

REPORT_FILE = names.REPORT_FILE
TUNING_PNG = "tuning_trials.png"
LOSS_PNG = "loss_curves.png"
CHECKPOINT_PNG = "checkpoint_evaluations.png"
CONFUSION_PNG = container.CONFUSION_MATRIX_FILE
LOSS_METRICS = (container.METRIC_TRAIN_LOSS, container.METRIC_VAL_LOSS)
UTILISATION_DIR = "utilisation"
SUSPECTS_DIR = "suspects"  # thumbnails of the suspected label errors the report lists
NOT_NEEDED = "NOT_NEEDED"  # the run's status when TrainWhen=drift found nothing to learn


def _fmt(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _value(text: str) -> str:
    """A hyperparameter as people read it: 0.0009759079315110718 -> 0.000976."""
    try:
        number = float(text)
    except ValueError:
        return text
    return text if number.is_integer() and "e" not in text.lower() else f"{number:.3g}"


def _usd(value: float | None) -> str:
    return "price unknown" if value is None else f"${value:.4f}"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def _image(lines: list[str], path: Path | None, alt: str, missing: str) -> None:
    lines.append(f"![{alt}]({path.name})" if path is not None else f"_{missing}_")
    lines.append("")


def utilisation_report(profile_dir: Path | None, out_dir: Path) -> Path | None:
    """The Debugger helper's per-job bottleneck report (heatmap + percentiles), when there is a profile."""
    if profile_dir is None or not profile_dir.is_dir():
        return None
    from retrain_training import bottleneck_report as bottleneck  # numpy and matplotlib: only when needed

    target = out_dir / UTILISATION_DIR
    target.mkdir(parents=True, exist_ok=True)
    try:
        return Path(bottleneck.write_report(profile_dir, target))
    except (OSError, ValueError, KeyError) as error:
        log.warning("no utilisation report from %s: %s", profile_dir, error)
        return None


def _uploads(facts: RunFacts) -> list[str]:
    """What this run took in (its cut), each refused file with its problem and what to do (it stays put);
    the data set's totals now, labelled as such."""
    totals = (
        f"The data set now (later uploads included): {facts.dataset_accepted} accepted, "
        f"{facts.dataset_rejected} rejected."
    )
    if not facts.cut:
        return ["## Uploads", "", "This run froze no manifest: it took no uploads in. " + totals, ""]
    by_problem: dict[str, int] = {}
    for r in facts.rejected:
        by_problem[r.problem] = by_problem.get(r.problem, 0) + 1
    kinds = ", ".join(f"{n} {problem}" for problem, n in sorted(by_problem.items()))
    said = (
        f"This run took in the uploads recorded before {facts.cut}: {facts.accepted} accepted "
        f"({facts.new_uploads} new since the previous run), {facts.refused} refused"
    )
    if kinds:
        said += f" ({kinds} still refused); refused files stay in the bucket until you fix or delete them"
    if len(facts.rejected) < facts.refused:
        said += f"; {facts.refused - len(facts.rejected)} of them were replaced or removed since"
    lines = ["## Uploads", "", said + ".", "", totals, ""]
    if facts.rejected:
        lines += _table(
            ["rejected key", "problem", "reason"],
            [[f"`{r.key}`", r.problem, r.reason] for r in facts.rejected],
        )
    return lines


def _data(facts: RunFacts) -> list[str]:
    """What the run trained on: per-class counts before and after balancing, labels set aside, and the
    files training could not decode."""
    lines = ["## Training data", ""]
    policy = facts.class_balance
    if policy:
        said = ", ".join(f"{k} {v}" for k, v in policy.items() if k != "mode")
        lines += [f"Class balance: **{policy.get('mode', 'none')}** ({said}).", ""]
    if facts.class_counts:
        lines += _table(
            ["class", "images", "validation", "training images", "training lines (after balancing)"],
            [
                [label, *(c.get(k, 0) for k in ("images", "validation", "train", "train_lines"))]
                for label, c in sorted(facts.class_counts.items())
            ],
        )
    else:
        lines += ["_no class counts recorded_", ""]
    if facts.excluded_labels:
        aside: list[list[object]] = [[k, v] for k, v in sorted(facts.excluded_labels.items())]
        lines += _table(["label set aside", "why"], aside)
    if facts.unreadable:
        lines += [f"Training could not decode {len(facts.unreadable)} accepted file(s); replace them:", ""]
        lines += _table(["unreadable key", "reason"], [[f"`{r.key}`", r.reason] for r in facts.unreadable])
    return lines


def _interval(values: Any) -> str:
    """ " (95% CI low-high)" of a recorded [low, high]; nothing without one."""
    if not isinstance(values, list | tuple) or len(values) != 2:
        return ""
    return f" (95% CI {_fmt(float(values[0]))}-{_fmt(float(values[1]))})"


def _signed(value: Any) -> str:
    return "—" if value is None else f"{float(value):+.4f}"


def _write_thumbnails(facts: RunFacts, out_dir: Path) -> list[str]:
    """Each listed suspect's thumbnail beside the report (its relative path, "" without one); what an
    earlier writing of the report left there goes first."""
    folder = out_dir / SUSPECTS_DIR
    if folder.is_dir():
        for old in folder.glob("*.jpg"):
            old.unlink()
    paths: list[str] = []
    for index, suspect in enumerate(facts.suspects, start=1):
        if not suspect.thumbnail:
            paths.append("")
            continue
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{index:03d}.jpg"
        (folder / name).write_bytes(suspect.thumbnail)
        paths.append(f"{SUSPECTS_DIR}/{name}")
    return paths


def _arrivals_figures(arrivals: dict[str, Any]) -> list[str]:
    """The champion's top-1 and top-3 on the new uploads beside its validation top-1, and the drift."""
    checked, new = arrivals.get("checked"), arrivals.get("new_images")
    validation = arrivals.get("validation_top1")
    reference = (
        "—"
        if validation is None
        else f"{_fmt(validation)}{_interval(arrivals.get('validation_interval'))} on "
        f"{arrivals.get('validation_images', 0)} images"
    )
    lines = _table(
        ["new uploads checked", "top-1", "top-3", "validation top-1", "drift (validation - new)"],
        [
            [
                f"{checked} of {new}" if arrivals.get("sampled") else checked,
                f"{_fmt(arrivals.get('top1'))}{_interval(arrivals.get('top1_interval'))}",
                _fmt(arrivals.get("top3")),
                reference,
                _signed(arrivals.get("drift")),
            ]
        ],
    )
    if arrivals.get("sampled"):
        lines += [
            f"A stratified sample of {checked} of the run's {new} new uploads was checked; the figures "
            "are the sample's.",
            "",
        ]
    lacks = arrivals.get("labels_the_model_lacks") or []
    if lacks:
        lines += [f"The new uploads hold labels the champion lacks (their images count as wrong): "
                  f"{', '.join(str(label) for label in lacks)}.", ""]  # fmt: skip
    return lines


def _arrivals_suspects(facts: RunFacts, out_dir: Path) -> list[str]:
    """The suspected label errors: how many, what became of them, and the first ones with thumbnails."""
    arrivals = facts.arrivals
    count = int(arrivals.get("suspect_count") or 0)
    lines = ["### Suspected label errors", ""]
    if not count:
        return [*lines, "Confident learning found no suspected label error among the new uploads.", ""]
    held = int(arrivals.get("held") or 0)
    hold = arrivals.get("suspect_labels") == "hold"
    fate = (
        f"{held} held out of this run's training (SuspectLabels=hold)"
        if hold
        else "kept in this run's training as labelled (SuspectLabels=keep)"
    )
    rate = float(arrivals.get("suspect_rate") or 0.0)
    lines += [
        f"{count} of the checked new uploads ({rate:.1%}) look mislabelled to the champion: {fate}. "
        "Nothing is deleted or relabelled for you. "
        f"The full list: `{arrivals.get('suspects_uri', '')}`.",
        "",
    ]
    if facts.suspects_problem:
        return [*lines, f"_{facts.suspects_problem}_", ""]
    if not facts.suspects:
        return lines
    thumbnails = _write_thumbnails(facts, out_dir)
    shown = len(facts.suspects)
    lines += [f"The first {shown} of {count}, the most confident first:" if shown < count else
              "Most confident first:", ""]  # fmt: skip
    in_training = "held out" if hold and held else "kept"
    lines += _table(
        ["image", "key", "given label", "suggested label", "confidence", "in training"],
        [
            [
                f"![{s.key}]({path})" if path else "—",
                f"`{s.key}`",
                s.given,
                s.suggested,
                _fmt(s.confidence, 3),
                in_training,
            ]
            for s, path in zip(facts.suspects, thumbnails, strict=True)
        ],
    )
    return lines


def _arrivals(facts: RunFacts, out_dir: Path) -> list[str]:
    """The champion on the run's new uploads (out of sample for it): its figures there beside its
    validation top-1, TrainWhen's decision, the labels most in need of a look and the suspected label
    errors. Nothing for a run that did not check them."""
    arrivals = facts.arrivals
    if not arrivals:
        return []
    lines = ["## The champion on the new uploads", ""]
    job = f"Processing job `{arrivals.get('job', '—')}` ({arrivals.get('status', '—')})"
    if arrivals.get("top1") is None:
        problem = arrivals.get("problem") or f"the job ended {arrivals.get('status', 'without figures')}"
        lines += [f"{job}: no figures — {problem}.", ""]
    else:
        lines += [f"{job}: the champion on the run's new uploads, which it never trained on.", ""]
        lines += _arrivals_figures(arrivals)
    said = {"train": "the run trains", "not_needed": "no retraining needed, the champion stays"}
    decision = said.get(str(arrivals.get("decision")), str(arrivals.get("decision") or "—"))
    lines += [
        f"**TrainWhen={arrivals.get('train_when', '—')}: {decision}** — {arrivals.get('reason', '')}.",
        "",
    ]
    if arrivals.get("top1") is None:
        return lines
    per_label = arrivals.get("per_label") or {}
    if per_label:
        lines += ["### Per label (most suspects first, then lowest top-1)", ""]
        lines += _table(
            ["label", "new images", "champion top-1", "suspects"],
            [
                [label, row.get("images", 0), _fmt(row.get("top1")), row.get("suspects", 0)]
                for label, row in per_label.items()
                if isinstance(row, dict)
            ],
        )
    return lines + _arrivals_suspects(facts, out_dir)


def _header(facts: RunFacts) -> list[str]:
    """The run's identity and outcome, and the gate's decision."""
    lines = [f"# Run {facts.run_id}", ""]
    lines += _table(
        ["dataset", "status", "started", "stopped"],
        [[facts.dataset, facts.status, facts.started or "—", facts.stopped or "—"]],
    )
    if facts.failure:
        lines += [f"**Failed:** {facts.failure}", ""]
    if facts.started_from:
        start = facts.started_from
        lines += [f"**Started from:** {notes.lineage(start)} — {start.get('reason', '')}", ""]
    lines += ["## Gate decision", ""]
    decision = {True: "passed", False: "rejected", None: "not reached"}[facts.gate_passed]
    if facts.status == NOT_NEEDED or facts.gate_decision == "not_needed":
        decision = "no retraining needed, the champion stays"
    lines += [f"**{decision}** — {facts.gate_reason or 'no reason recorded'}", ""]
    if facts.model_package:
        lines += [f"Model package: `{facts.model_package}`", ""]
    return lines


def _tracking(facts: RunFacts) -> list[str]:
    """Where the run is in MLflow (`retrain ui`), and what its tracking could not do."""
    if not facts.mlflow_run_id and not facts.tracking_warnings:
        return []
    lines = ["## Experiment tracking", ""]
    if facts.mlflow_run_id:
        lines += [
            f"MLflow run `{facts.mlflow_run_id}` in experiment `retrain/{facts.dataset}`, a child run per "
            "training job (`retrain ui` opens it).",
            "",
        ]
    lines += [f"- **Warning:** {w}" for w in facts.tracking_warnings]
    return [*lines, ""] if facts.tracking_warnings else lines


def _tuning(facts: RunFacts, out_dir: Path) -> list[str]:
    """The tuning job, every trial with the hyperparameters that varied, their chart and the best values."""
    lines = ["## Tuning", ""]
    if facts.tuning_job:
        lines += [
            f"Tuning job `{facts.tuning_job}`, best `{facts.best_job or '—'}` "
            f"({facts.objective_metric or 'objective'} {_fmt(facts.objective)}).",
            "",
        ]
    tuned = charts.tuned_hyperparameters(facts.trials)
    if facts.trials:
        lines += _table(
            ["job", "status", "objective", *tuned, "interruptions"],
            [
                [
                    t.job_name,
                    t.status,
                    _fmt(t.objective),
                    *(_value(t.hyperparameters.get(n, "")) for n in tuned),
                    t.interruptions,
                ]
                for t in facts.trials
            ],
        )
    _image(
        lines,
        charts.tuning_trials(facts.trials, facts.objective_metric, out_dir / TUNING_PNG),
        "tuning trials",
        "no scored trials with varying hyperparameters",
    )
    if facts.best_hyperparameters:
        lines += _table(
            ["best hyperparameter", "value"],
            [[k, _value(v)] for k, v in sorted(facts.best_hyperparameters.items())],
        )
    return lines


def _training(facts: RunFacts, out_dir: Path) -> list[str]:
    """The loss curves with the steps training resumed at, and the checkpoint evaluations."""
    lines = ["## Training and validation loss", ""]
    _image(
        lines,
        charts.loss_curves(
            facts.curves,
            (container.METRIC_TRAIN_LOSS, container.METRIC_VAL_LOSS),
            out_dir / LOSS_PNG,
            best=facts.best_job,
        ),
        "loss curves",
        "no metric lines in the jobs' logs",
    )
    if facts.resumed_at_steps:
        steps = ", ".join(str(s) for s in facts.resumed_at_steps)
        lines += [f"Resumed from checkpoints at steps {steps} after spot interruptions.", ""]

    lines += ["## Checkpoint evaluations", ""]
    _image(
        lines,
        charts.checkpoint_curve(facts.checkpoint_evaluations, out_dir / CHECKPOINT_PNG, best=facts.best_job),
        "checkpoint evaluations",
        "no checkpoint was evaluated during training",
    )
    return lines


REPORT_CLASS_ROWS = 50
REPORT_CONFUSION_ROWS = 20


def _recall(stats: Any) -> float:
    return float(stats.get("recall", 0.0)) if isinstance(stats, dict) else 0.0


def _evaluation(facts: RunFacts, out_dir: Path) -> list[str]:
    """The held-out scores against the champion's, per class, and the confusion matrix."""
    lines = ["## Evaluation", ""]
    ev = facts.evaluation
    lines += _table(
        ["top-1", "top-3", "champion top-1"], [[_fmt(ev.top1), _fmt(ev.top3), _fmt(ev.baseline_top1)]]
    )
    if ev.per_class:
        classes = list(ev.per_class.items())
        if len(classes) > REPORT_CLASS_ROWS:  # a catalogue: the classes that need attention first
            classes = sorted(classes, key=lambda item: _recall(item[1]))[:REPORT_CLASS_ROWS]
            lines += [
                f"The {REPORT_CLASS_ROWS} classes of lowest recall, of {len(ev.per_class)} "
                "(every class in evaluation.json):",
                "",
            ]
        rows: list[list[object]] = []
        for label, stats in classes:
            s = stats if isinstance(stats, dict) else {}
            rows.append([label, _fmt(s.get("precision")), _fmt(s.get("recall")), s.get("support", "—")])
        lines += _table(["class", "precision", "recall (class accuracy)", "support"], rows)
    if ev.confusions and not ev.confusion_matrix:
        lines += ["Most frequent confusions:", ""]
        lines += _table(
            ["true class", "predicted as", "images"],
            [[true, predicted, count] for true, predicted, count in ev.confusions[:REPORT_CONFUSION_ROWS]],
        )
    _image(
        lines,
        charts.confusion_matrix(ev.confusion_matrix, ev.labels, out_dir / CONFUSION_PNG),
        "confusion matrix",
        "no confusion matrix recorded",
    )
    return lines


def _rules(facts: RunFacts) -> list[str]:
    """Each rule's verdict and what the gate does with a finding (BlockingRules: block, else warn), then
    what to do about each finding."""
    lines = ["## Rule checks", ""]
    if not facts.rules:
        return [*lines, "_no rule results recorded_", ""]
    lines += _table(
        ["rule", "status", "gate", "step", "detail"],
        [
            [r.rule, r.status, r.action or "—", "—" if r.step is None else r.step, r.detail]
            for r in facts.rules
        ],
    )
    found = [r for r in facts.rules if r.status == rule_names.ISSUES and r.rule in rule_names.ADVICE]
    if found:
        lines += ["What to do:", ""]
        lines += [f"- {r.rule}: {rule_names.ADVICE[r.rule]}." for r in found]
        lines.append("")
    return lines


def _costs(facts: RunFacts) -> list[str]:
    """Each job's spot saving and cost, and the run's total (unknown when any job's price is)."""
    cost_rows: list[list[object]] = []
    total_demand = total_billed = 0.0
    priced = True
    for job in facts.all_jobs:
        cost = job_cost(job.instance_type, job.instance_count, job.training_seconds, job.billable_seconds)
        saving = spot_savings_pct(job.training_seconds, job.billable_seconds)
        cost_rows.append(
            [
                job.job_name,
                f"{job.instance_count} x {job.instance_type or '?'}",
                job.training_seconds,
                job.billable_seconds,
                _fmt(saving, 1),
                _usd(cost.on_demand_usd),
                _usd(cost.billed_usd),
            ]
        )
        if cost.on_demand_usd is None or cost.billed_usd is None:
            priced = False
        else:
            total_demand += cost.on_demand_usd
            total_billed += cost.billed_usd
    saving = spot_savings_pct(facts.training_seconds, facts.billable_seconds)
    cost_rows.append(
        [
            "**total**",
            "",
            facts.training_seconds,
            facts.billable_seconds,
            _fmt(saving, 1),
            _usd(total_demand if priced else None),
            _usd(total_billed if priced else None),
        ]
    )
    lines = ["## Spot capacity and cost", ""]
    lines += _table(
        ["job", "instances", "training s", "billable s", "spot saving %", "on-demand cost", "billed cost"],
        cost_rows,
    )
    lines += [
        f"Prices: {PRICE_SOURCE}, {PRICE_REGION}, prices of {PRICE_DATE}. Billed cost = billable "
        "seconds x instance price; the spot saving is 1 - billable / training seconds.",
        "",
    ]
    return lines


def _utilisation(facts: RunFacts, out_dir: Path) -> list[str]:
    """A link to the best job's bottleneck report and its heatmaps, when the run has a profile."""
    lines = ["## CPU/GPU utilisation", ""]
    utilisation = utilisation_report(facts.profile_dir, out_dir)
    if utilisation is None:
        return [*lines, "_no system profile for this run_", ""]
    lines += [
        f"Bottleneck report of `{facts.best_job}`: [{utilisation.name}]"
        f"({utilisation.relative_to(out_dir).as_posix()})",
        "",
    ]
    for png in sorted(utilisation.parent.glob("*.png")):
        lines += [f"![{png.stem}]({png.relative_to(out_dir).as_posix()})", ""]
    return lines


def _time(facts: RunFacts) -> list[str]:
    """The execution's phases from Step Functions' history (retrain.report.timing)."""
    if not facts.phases:
        return []
    return ["## Where the time went", "", *timing.markdown(facts.phases), ""]


def write_report(facts: RunFacts, out_dir: Path) -> Path:
    """`report.md` in `out_dir`, its sections in reading order, with the PNGs it shows beside it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = [
        *_header(facts),
        *_uploads(facts),
        *_arrivals(facts, out_dir),
        *_data(facts),
        *_tuning(facts, out_dir),
        *_training(facts, out_dir),
        *_evaluation(facts, out_dir),
        *_rules(facts),
        *_costs(facts),
        *_time(facts),
        *_utilisation(facts, out_dir),
        *_tracking(facts),
    ]
    path = out_dir / REPORT_FILE
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
