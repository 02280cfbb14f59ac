"""The training image's PID 1 (retrain_training.entrypoint): the toolkit's list of smdebug's exception
classes, read without importing smdebug's package and torch into it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# A fresh interpreter: what PID 1 imports is the subject, and this test process has torch already.
PROBE = """
import json, sys
from retrain_training import entrypoint
names = entrypoint.debugger_exception_names()
torch_in_pid1 = "torch" in sys.modules or "smdebug" in sys.modules
from sagemaker_training import process
toolkit = process.get_debugger_exception_classes()
print(json.dumps({"names": [str(n) for n in names], "toolkit": [str(n) for n in toolkit],
                  "torch_in_pid1": torch_in_pid1}))
"""


@pytest.mark.parametrize("use_smdebug", [None, "0"])
def test_pid1_lists_the_toolkits_debugger_exceptions_without_importing_torch(use_smdebug: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "USE_SMDEBUG"}
    if use_smdebug is not None:
        env["USE_SMDEBUG"] = use_smdebug
    # WHEN PID 1's list is taken, and then the toolkit's own (which imports smdebug, and torch)
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    probe = json.loads(done.stdout.splitlines()[-1])
    # THEN they are the same list, and PID 1's left neither smdebug nor torch imported
    assert probe["names"] == probe["toolkit"]
    assert probe["torch_in_pid1"] is False
    if use_smdebug is None:
        assert "TensorUnavailableForStep" in probe["names"]
