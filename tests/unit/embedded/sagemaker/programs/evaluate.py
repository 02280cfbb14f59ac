"""A stand-in evaluation program: counts its input files and writes evaluation.json to --output."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from retrain_contract import container as contract


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--fail", default="")
    args = parser.parse_args()
    if args.fail:
        contract.write_failure(contract.resolve_paths(), f"RuntimeError: {args.fail}")
        return 2
    files = sorted(p.relative_to(args.input).as_posix() for p in Path(args.input).rglob("*") if p.is_file())
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / contract.EVALUATION_FILE).write_text(json.dumps({"files": files, "top1": 0.5}), encoding="utf-8")
    print(f"evaluated {len(files)} files", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
