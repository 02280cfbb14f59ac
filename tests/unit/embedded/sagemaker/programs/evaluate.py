"""A stand-in evaluation program: counts its input files and writes evaluation.json to --output."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from retrain_contract import container as contract


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--fail", default="")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds to run, to overlap with others")
    args = parser.parse_args()
    began = time.time()
    time.sleep(args.sleep)
    if args.fail:
        contract.write_failure(contract.resolve_paths(), f"RuntimeError: {args.fail}")
        return 2
    files = sorted(p.relative_to(args.input).as_posix() for p in Path(args.input).rglob("*") if p.is_file())
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / contract.EVALUATION_FILE).write_text(
        json.dumps({"files": files, "top1": 0.5, "ran": [began, time.time()]}), encoding="utf-8"
    )
    print(f"evaluated {len(files)} files", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
