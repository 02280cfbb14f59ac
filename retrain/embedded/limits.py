"""AWS's size limits the embedded stack enforces: the one place that states each number.

Every limit is in bytes, as AWS counts it; the page that states it is beside it. The enforcing code
imports the number from here and names it in its error, so a refusal says which limit and by how much.
"""

from __future__ import annotations

import json
from typing import Any, Final

# https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html ("Maximum input or output size
# for a task, state, or execution: 256 KiB of data as a UTF-8 encoded string"); StartExecution's ``input``
# has the same maximum, counted in UTF-8 bytes (API reference, StartExecution).
STATES_PAYLOAD_BYTES: Final = 262_144

# https://docs.aws.amazon.com/lambda/latest/dg/API_Invoke.html ("For synchronous invocations, the maximum
# payload size is 6 MB. For asynchronous invocations, the maximum payload size is 1 MB"; MB is MiB there,
# https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html). Lambda refuses a larger
# request with RequestEntityTooLargeException ("Request must be smaller than 6291456 bytes for the
# InvokeFunction operation"; "N byte payload is too large for the Event invocation type (limit L bytes)");
# its response check allows 100 bytes more, as its error message states: "Response payload size exceeded
# maximum allowed payload size (6291556 bytes)."
LAMBDA_SYNC_REQUEST_BYTES: Final = 6_291_456
LAMBDA_ASYNC_REQUEST_BYTES: Final = 1_048_576
LAMBDA_RESPONSE_BYTES: Final = 6_291_556

# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html#limits-items ("The
# maximum item size in DynamoDB is 400 KB, which includes both attribute name binary length (UTF-8
# length) and attribute value lengths"), sizes counted as in
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html.
DYNAMODB_ITEM_BYTES: Final = 409_600


def json_bytes(value: Any) -> int:
    """The size of ``value`` as compact JSON in UTF-8, as Step Functions measures a state's data."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str).encode("utf-8"))
