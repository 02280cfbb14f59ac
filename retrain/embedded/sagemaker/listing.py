"""The List* calls' common part: their input contract, time filters, sorting and pagination.

Every list request is first held to botocore's model of its operation (`MaxResults` 1..100, the
`SortBy`/`StatusEquals` enums, name patterns) with the service's wording, as SageMaker's front end does
before the emulator sees it. Pages are cut from the filtered, sorted list at an offset carried in an
opaque `NextToken`; a token this emulator did not hand out is refused.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.utils import parse_timestamp

from retrain.embedded.gatekeeper import contracts
from retrain.embedded.sagemaker.errors import client_error, validation

# The service's page size when MaxResults is not given. ListHyperParameterTuningJobs and
# ListTrainingJobsForHyperParameterTuningJob document "The default value is 10"; the other list calls
# answer 10 at a time as well.
DEFAULT_MAX_RESULTS = 10
ASCENDING, DESCENDING = "Ascending", "Descending"


def check_request(operation: str, request: Mapping[str, Any]) -> None:
    """Refuse what the operation's input contract refuses, with the service's code and message."""
    try:
        contracts.check("sagemaker", operation, request)
    except contracts.ContractError as error:
        raise client_error(error.code, error.message, operation) from None


def epoch(value: Any) -> float:
    """A timestamp as botocore sends it (epoch seconds over JSON), a datetime or an ISO 8601 string."""
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    if isinstance(value, str):
        return float(parse_timestamp(value).timestamp())
    return float(value)


@dataclass(frozen=True)
class TimeFilters:
    """`CreationTime{After,Before}` and `LastModifiedTime{After,Before}`: strictly after, strictly before."""

    created_after: float | None = None
    created_before: float | None = None
    modified_after: float | None = None
    modified_before: float | None = None

    @classmethod
    def of(cls, request: Mapping[str, Any]) -> TimeFilters:
        def at(key: str) -> float | None:
            return None if request.get(key) is None else epoch(request[key])

        return cls(
            at("CreationTimeAfter"),
            at("CreationTimeBefore"),
            at("LastModifiedTimeAfter"),
            at("LastModifiedTimeBefore"),
        )

    def keep(self, created: float, modified: float | None = None) -> bool:
        checks = (
            (self.created_after, created, 1),
            (self.created_before, created, -1),
            (self.modified_after, modified, 1),
            (self.modified_before, modified, -1),
        )
        for bound, value, direction in checks:
            if bound is None:
                continue
            if value is None or (value - bound) * direction <= 0:
                return False
        return True


def sort(
    items: Sequence[dict[str, Any]],
    request: Mapping[str, Any],
    keys: Mapping[str, Callable[[dict[str, Any]], Any]],
    default: str,
    tie: Callable[[dict[str, Any]], Any],
) -> list[dict[str, Any]]:
    """Items in `SortBy` order (`default` when absent; `keys` maps each value to a key function),
    `SortOrder` Ascending unless told; `tie` orders items whose keys are equal."""
    key = keys[request.get("SortBy") or default]
    descending = (request.get("SortOrder") or ASCENDING) == DESCENDING
    return sorted(items, key=lambda item: (key(item), tie(item)), reverse=descending)


def _token(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode()


def _offset(token: str, operation: str) -> int:
    try:
        offset = json.loads(base64.urlsafe_b64decode(token.encode()))["offset"]
    except (binascii.Error, ValueError, TypeError, KeyError):
        offset = None
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise validation(f"Invalid pagination token: {token!r} was not returned by {operation}", operation)
    return offset


def page(
    items: Sequence[dict[str, Any]],
    key: str,
    request: Mapping[str, Any],
    operation: str,
    *,
    keep: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[str, Any]:
    """`{key: [...], "NextToken": ...}`: at most MaxResults items from the request's NextToken on.

    `keep`, when given, is applied to the page after it was cut (ListTrainingJobs' StatusEquals with
    MaxResults, as the service documents it): such a page may hold fewer items, or none, and still
    have a NextToken."""
    start = _offset(request["NextToken"], operation) if request.get("NextToken") else 0
    size = int(request.get("MaxResults") or DEFAULT_MAX_RESULTS)
    chosen = list(items[start : start + size])
    result: dict[str, Any] = {key: [item for item in chosen if keep(item)] if keep else chosen}
    if start + size < len(items):
        result["NextToken"] = _token(start + size)
    return result
