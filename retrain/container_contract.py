"""The container contract (`training_image/contract.py`) for the CLI: one import, on the repo's path.

Under pytest and mypy `training_image/` is already on the path; an installed `retrain` command run from
the repository adds it here, so every name still comes from that one file.
"""

from __future__ import annotations

import sys
from pathlib import Path

TRAINING_IMAGE_DIR = Path(__file__).resolve().parent.parent / "training_image"

try:
    from retrain_contract import container as contract
except ModuleNotFoundError:
    sys.path.insert(0, str(TRAINING_IMAGE_DIR))
    from retrain_contract import container as contract

__all__ = ["TRAINING_IMAGE_DIR", "contract"]
