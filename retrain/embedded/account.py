"""The AWS account and region the embedded stack emulates: the one place that names them.

Every ARN, queue URL and pseudo parameter (``AWS::AccountId``, ``AWS::Region``) of the emulation is
built from these two; moto's default account is the same id, so what moto creates agrees.
"""

from __future__ import annotations

from typing import Final

ACCOUNT_ID: Final = "123456789012"
REGION: Final = "us-east-1"
