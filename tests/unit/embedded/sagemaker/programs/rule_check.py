"""A stand-in rule check: finds issues for LossNotDecreasing when the job wrote managed hook tensors,
no issues for every other rule; exits 1 without tensors, as the real one does when nothing ran."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from retrain_contract import container as contract


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input-dir", type=Path, required=True)
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--rules", required=True)
    parser.add_argument("--no-report", action="store_true")
    args = parser.parse_args()
    tensors = sorted((args.input_dir / "tensors" / "events").glob("*.tfevents"))
    if not tensors:
        print("no tensors found", flush=True)
        return 1
    results = [
        {
            "rule": rule,
            "status": "IssuesFound" if rule == "LossNotDecreasing" else "NoIssuesFound",
            "step": 4 if rule == "LossNotDecreasing" else None,
            "detail": f"checked {len(tensors)} files",
        }
        for rule in args.rules.split(",")
    ]
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / contract.RULE_RESULTS_FILE).write_text(json.dumps(results), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
