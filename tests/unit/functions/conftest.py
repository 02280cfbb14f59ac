"""Fixtures of the control-plane unit tests: moto-backed AWS and a configuration naming its resources."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.unit.functions.support import Aws, make_config, moto_aws


@pytest.fixture
def aws() -> Iterator[Aws]:
    yield from moto_aws()


@pytest.fixture
def config(aws: Aws) -> Any:
    return make_config(aws, min_new_images=1, quiet_period_seconds=60, max_wait_seconds=3600)
