"""What every benchmark's BENCHMARKS.md section says of where and how it ran, and how it is recorded."""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path


def when() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def machine_line(load_before: float, load_after: float) -> str:
    """The machine, the load around the measurement, and the command that reproduces it."""
    command = f"`.venv/bin/python bench/{Path(sys.argv[0]).name} " + " ".join(sys.argv[1:]) + "`"
    return (
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"1-minute load average {load_before:.1f} before, {load_after:.1f} after. Command: {command}."
    )


def publish(section: str, append: Path | None) -> None:
    """Print the section, and append it to `append` (BENCHMARKS.md) when given."""
    print(section)
    if append:
        with append.open("a", encoding="utf-8") as out:
            out.write("\n" + section)
