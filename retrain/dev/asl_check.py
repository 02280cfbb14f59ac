"""Print a state machine with its DefinitionSubstitutions filled, for asl-validator.

The ASL files hold `${Name}` placeholders that SAM fills at deploy time from template.yaml; the
validator needs concrete ARNs, so each placeholder named in the template is replaced by a
well-formed ARN or name of the same kind.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from retrain.embedded.account import ACCOUNT_ID, REGION

PLACEHOLDER = re.compile(r"\$\{(?P<name>[A-Za-z0-9_]+)\}")


def stand_in(name: str) -> str:
    """A syntactically valid value for the placeholder `name`, chosen by its suffix."""
    lowered = name.lower()
    if lowered.endswith("functionarn"):
        return f"arn:aws:lambda:{REGION}:{ACCOUNT_ID}:function:{name}"
    if lowered.endswith("topicarn"):
        return f"arn:aws:sns:{REGION}:{ACCOUNT_ID}:{name}"
    if lowered.endswith("rolearn"):
        return f"arn:aws:iam::{ACCOUNT_ID}:role/{name}"
    if lowered.endswith("arn"):
        return f"arn:aws:states:{REGION}:{ACCOUNT_ID}:stateMachine:{name}"
    return f"stand-in-{name}"


def fill(text: str) -> str:
    return PLACEHOLDER.sub(lambda match: stand_in(match.group("name")), text)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m retrain.dev.asl_check STATEMACHINE.asl.json", file=sys.stderr)
        return 2
    sys.stdout.write(fill(Path(argv[0]).read_text(encoding="utf-8")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
