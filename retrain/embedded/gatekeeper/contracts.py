"""AWS's input contract, enforced: a request's parameters checked against botocore's service model.

botocore's client-side ``ParamValidator`` checks required members, types and minimums only. AWS's front end
(Coral) also refuses values longer than a member's ``max``, numbers above their ``max``, strings outside
their ``enum`` and strings that do not match their ``pattern`` (as a whole: Java's ``matches()``). This
module checks all of it and words the refusal as AWS does::

    1 validation error detected: Value 'a_b' at 'modelPackageGroupName' failed to satisfy constraint:
    Member must satisfy regular expression pattern: [a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}

Paths join lowerCamel member names with ``.``, list items 1-based (``inputDataConfig.1.channelName``).
Sensitive members show no value (``Value at 'input' failed ...``), as AWS words them. A map's keys or
scalar values that break their constraints give one violation at the map, listing the key or value shape's
constraints (``Map value must satisfy constraint: [...]``), as AWS words it too.

Patterns are Java regexes, translated to the ``regex`` module's dialect (Java's ASCII-only ``\\w \\d \\s``
and POSIX ``\\p{Alnum}``-style classes, Java's ``.``, ``\\Q...\\E``, nested classes). One that still does
not compile is skipped and recorded in :data:`UNCHECKED_PATTERNS`.
"""

from __future__ import annotations

import datetime
import functools
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, Protocol

import botocore.session
import regex  # type: ignore[import-untyped]
from botocore import xform_name
from botocore.model import (
    ListShape,
    MapShape,
    OperationModel,
    ServiceModel,
    Shape,
    StringShape,
    StructureShape,
)
from botocore.utils import parse_timestamp

LOG = logging.getLogger(__name__)

DEFAULT_CODE: Final = "ValidationException"
# The error code each service answers a constraint violation with, where it is not ValidationException.
ERROR_CODES: Final[Mapping[str, str]] = {
    "s3": "InvalidArgument",
    "sns": "InvalidParameter",
    "sqs": "InvalidParameterValue",
    "cloudformation": "ValidationError",
    "iam": "ValidationError",
    "sts": "ValidationError",
    "sagemaker-runtime": "ValidationError",
}
# Limits AWS applies that botocore's models omit, in UTF-8 bytes: (service, shape name) -> (max, error code,
# the service's message). S3 object keys may be 1024 bytes long; the model gives only ``min: 1``.
BYTE_LIMITS: Final[Mapping[tuple[str, str], tuple[int, str, str]]] = {
    ("s3", "ObjectKey"): (1024, "KeyTooLongError", "Your key is too long"),
}
# String shapes whose length constraint AWS counts in UTF-8 bytes, not characters: Step Functions' state
# data ("Length constraints apply to the payload size, and are expressed as bytes in UTF-8 encoding",
# StartExecution's ``input`` in the API reference; the limit is retrain.embedded.limits'
# STATES_PAYLOAD_BYTES, which a test holds equal to the model's).
UTF8_LENGTHS: Final[frozenset[tuple[str, str]]] = frozenset({("stepfunctions", "SensitiveData")})
MAX_SHOWN: Final = 256
MASK: Final = "***"

UNCHECKED_PATTERNS: set[str] = set()
"""Model patterns that did not compile (their check is skipped), filled as they are met."""


class _Pattern(Protocol):
    def fullmatch(self, string: str) -> object | None: ...


@dataclass(frozen=True)
class Violation:
    """One broken constraint: the member's AWS path, the constraint's wording and the offending value."""

    path: str
    message: str
    value: Any
    sensitive: bool = False

    def describe(self) -> str:
        """This violation as one clause of AWS's message."""
        if self.value is None:
            shown = "Value null"
        elif self.sensitive:
            shown = "Value"
        else:
            shown = f"Value '{_display(self.value)}'"
        return f"{shown} at '{self.path}' failed to satisfy constraint: {self.message}"


class ContractError(Exception):
    """A request AWS would refuse at its input contract, with the service's error code and message."""

    def __init__(self, code: str, message: str, violations: tuple[Violation, ...]) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.violations = violations

    def __reduce__(self) -> tuple[type[ContractError], tuple[str, str, tuple[Violation, ...]]]:
        return type(self), (self.code, self.message, self.violations)


def violations(
    service: str, operation: str, params: Mapping[str, Any], *, unknown: Callable[[Any], bool] | None = None
) -> list[Violation]:
    """Every constraint of ``operation``'s input shape (botocore or boto3 name) that ``params`` break.

    ``unknown(value)`` marks values known only later (a state machine's ``Name.$`` paths): such a value
    counts as present and is not checked."""
    found: list[Violation] = []
    shape = _operation(service, operation).input_shape
    if shape is None:
        found.extend(
            Violation(_camel(name), "Member is not a member of the input shape", value)
            for name, value in params.items()
        )
        return found
    _Walk(service, found, unknown).structure(shape, params, "", sensitive=False)
    return found


def check(service: str, operation: str, params: Mapping[str, Any]) -> None:
    """Raise :class:`ContractError` when ``params`` break ``operation``'s input contract."""
    found = violations(service, operation, params)
    if not found:
        return
    for (limited, _), (limit, code, message) in BYTE_LIMITS.items():
        if limited == service and any(v.message == _byte_limit_message(limit) for v in found):
            raise ContractError(code, message, tuple(found))
    count = len(found)
    clauses = "; ".join(violation.describe() for violation in found)
    message = f"{count} validation error{'s' if count != 1 else ''} detected: {clauses}"
    raise ContractError(ERROR_CODES.get(service, DEFAULT_CODE), message, tuple(found))


def prepare(service: str, operation: str) -> frozenset[str]:
    """Load ``operation``'s model and compile every pattern its input reaches; returns those patterns."""
    shape = _operation(service, operation).input_shape
    reached = [] if shape is None else _reachable(shape)
    patterns = frozenset(current.metadata["pattern"] for current in reached if "pattern" in current.metadata)
    for pattern in patterns:
        _compiled(pattern)
    return patterns


def _reachable(shape: Shape) -> list[Shape]:
    """``shape`` and every shape beneath it, each name once."""
    found: dict[str, Shape] = {}
    pending = [shape]
    while pending:
        current = pending.pop()
        if current.name in found:
            continue
        found[current.name] = current
        if isinstance(current, StructureShape):
            pending.extend(current.members.values())
        elif isinstance(current, ListShape):
            pending.append(current.member)
        elif isinstance(current, MapShape):
            pending.extend((current.key, current.value))
    return list(found.values())


_LOCK: Final = threading.Lock()


@functools.cache
def _model(service: str) -> ServiceModel:
    with _LOCK:
        return botocore.session.get_session().get_service_model(service)


@functools.cache
def _operation(service: str, operation: str) -> OperationModel:
    model = _model(service)
    if operation not in model.operation_names:
        by_method = {xform_name(name): name for name in model.operation_names}
        if operation not in by_method:
            raise ValueError(f"{service} has no operation {operation!r}")
        operation = by_method[operation]
    return model.operation_model(operation)


def _camel(name: str) -> str:
    return name[:1].lower() + name[1:]


def _join(path: str, name: str) -> str:
    return f"{path}.{_camel(name)}" if path else _camel(name)


def _display(value: Any) -> str:
    text = _text(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "..."


def _text(value: Any) -> str:
    for kinds, form in _TEXT_FORMS:
        if isinstance(value, kinds):
            return form(value)
    return str(value)


# How a value is written in a refusal, by its type (the first that fits; anything else as str()).
_TEXT_FORMS: Final[tuple[tuple[type | tuple[type, ...], Callable[[Any], str]], ...]] = (
    (str, lambda value: value),
    (bool, lambda value: "true" if value else "false"),
    ((bytes, bytearray), lambda value: bytes(value).decode("utf-8", errors="replace")),
    (Mapping, lambda value: "{" + ", ".join(f"{key}={_text(item)}" for key, item in value.items()) + "}"),
    ((list, tuple), lambda value: "[" + ", ".join(_text(item) for item in value) + "]"),
    ((datetime.datetime, datetime.date), lambda value: value.isoformat()),
)


def _byte_limit_message(limit: int) -> str:
    return f"Member must have length less than or equal to {limit} bytes"


# --- patterns: Java's dialect in the regex module's (version 1: nested classes, && intersections) -------

# Java's POSIX-named classes are US-ASCII only, as are \w \d \s (unlike Python's Unicode ones).
_JAVA_CLASSES: Final[Mapping[str, str]] = {
    "Lower": "a-z",
    "Upper": "A-Z",
    "ASCII": r"\x00-\x7F",
    "Alpha": "a-zA-Z",
    "Digit": "0-9",
    "Alnum": "a-zA-Z0-9",
    "Punct": r"\x21-\x2F\x3A-\x40\x5B-\x60\x7B-\x7E",
    "Graph": r"\x21-\x7E",
    "Print": r"\x20-\x7E",
    "Blank": r"\x20\t",
    "Cntrl": r"\x00-\x1F\x7F",
    "XDigit": "0-9a-fA-F",
    "Space": r"\x20\t\n\x0B\f\r",
    # Java's own Unicode classes the regex module lacks.
    "all": r"\x00-\U0010FFFF",
    "LD": r"\p{L}\p{Nd}",
    "L1": r"\x00-\xFF",
}
_SHORTHANDS: Final[Mapping[str, str]] = {
    "w": "a-zA-Z_0-9",
    "d": "0-9",
    "s": r"\x20\t\n\x0B\f\r",
    "h": r"\x20\t\xA0\u1680\u180E\u2000-\u200A\u202F\u205F\u3000",  # Java's horizontal whitespace
    "v": r"\n\x0B\f\r\x85\u2028\u2029",  # Java's vertical whitespace (Python's \v is \x0B alone)
}
_JAVA_DOT: Final = r"[^\n\r\x85\u2028\u2029]"  # Java's '.' stops at any line terminator
_DOTALL: Final = regex.compile(r"\(\?[a-zA-Z]*s")
_COMPILED: dict[str, _Pattern | None] = {}


def _compiled(pattern: str) -> _Pattern | None:
    try:
        return _COMPILED[pattern]
    except KeyError:
        pass
    compiled: _Pattern | None
    try:
        compiled = regex.compile(_translate(pattern), regex.V1)
    except (regex.error, ValueError, IndexError) as error:
        compiled = None
        UNCHECKED_PATTERNS.add(pattern)
        LOG.warning("pattern %r does not compile (%s); values are not checked against it", pattern, error)
    _COMPILED[pattern] = compiled
    return compiled


def _class(body: str, *, negated: bool, inside: bool) -> str:
    if negated:
        return f"[^{body}]"
    return body if inside else f"[{body}]"


def _code_point(java: str, index: int) -> tuple[int, int]:
    """The code point of the ``\\uXXXX`` (or pair) or ``\\x{...}`` escape at ``index``, and where it ends."""
    if java[index + 1] == "x":
        close = java.index("}", index)
        return int(java[index + 3 : close], 16), close + 1
    code = int(java[index + 2 : index + 6], 16)
    low = java[index + 8 : index + 12] if java.startswith("\\u", index + 6) else ""
    if 0xD800 <= code <= 0xDBFF and len(low) == 4 and 0xDC00 <= int(low, 16) <= 0xDFFF:
        return 0x10000 + ((code - 0xD800) << 10) + (int(low, 16) - 0xDC00), index + 12
    return code, index + 6


def _translate(java: str) -> str:
    """``java`` rewritten for ``regex`` in version-1 mode, with Java's meaning kept."""
    out: list[str] = []
    dotall = _DOTALL.search(java) is not None
    depth = 0  # character-class nesting
    index = 0
    while index < len(java):
        if java[index] == "\\" and index + 1 < len(java):
            text, index = _translate_escape(java, index, inside=depth > 0)
        else:
            previous = out[-1] if out else ""
            text, depth = _translate_char(java[index], depth, previous=previous, dotall=dotall)
            index += 1
        out.append(text)
    return "".join(out)


# Java's end anchors outside a character class: \z is the very end, \Z allows a final line terminator.
_END_ANCHORS: Final[Mapping[str, str]] = {
    "z": r"\Z",
    "Z": r"(?=(?:\r\n|[\n\r\x85\u2028\u2029])?\Z)",
}


def _translate_escape(java: str, index: int, *, inside: bool) -> tuple[str, int]:
    """The escape at ``index`` (a backslash and more) translated, and where it ends."""
    escaped = java[index + 1]
    if escaped in "pP":
        return _translate_property(java, index, inside=inside)
    if escaped.lower() in _SHORTHANDS:
        return _class(_SHORTHANDS[escaped.lower()], negated=escaped.isupper(), inside=inside), index + 2
    if escaped == "u" or java.startswith("x{", index + 1):
        # Java's \x{h...h}, and \uD800\uDC00-style surrogate pairs (one code point in Java)
        code, end = _code_point(java, index)
        return f"\\U{code:08X}", end
    if escaped == "Q":
        return _translate_quoted(java, index)
    if not inside and escaped in _END_ANCHORS:
        return _END_ANCHORS[escaped], index + 2
    return java[index : index + 2], index + 2


def _translate_property(java: str, index: int, *, inside: bool) -> tuple[str, int]:
    r"""``\p{Name}``/``\pL`` (``\P`` negated): Java's classes spelt out, others kept as they are."""
    if java[index + 2 : index + 3] == "{":
        close = java.index("}", index + 2)
        name, end = java[index + 3 : close], close + 1
    else:
        name, end = java[index + 2 : index + 3], index + 3
    body = _JAVA_CLASSES.get(name)
    if body is None:
        return java[index:end], end
    return _class(body, negated=java[index + 1] == "P", inside=inside), end


def _translate_quoted(java: str, index: int) -> tuple[str, int]:
    r"""``\Q...\E`` (or to the end): every character but letters and digits escaped."""
    close = java.find("\\E", index + 2)
    literal = java[index + 2 :] if close < 0 else java[index + 2 : close]
    text = "".join(ch if ch.isalnum() else "\\" + ch for ch in literal)
    return text, len(java) if close < 0 else close + 2


def _translate_char(char: str, depth: int, *, previous: str, dotall: bool) -> tuple[str, int]:
    """One unescaped character translated, and the character-class nesting after it."""
    if not depth:
        if char == "." and not dotall:
            return _JAVA_DOT, depth
        return char, int(char == "[")
    nesting = depth + {"[": 1, "]": -1}.get(char, 0)
    if char in "|~" or (char == "-" and previous == "-"):
        return "\\" + char, nesting  # set operators in version 1, plain characters in Java
    return char, nesting


# --- the walk ------------------------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def _is_timestamp(value: Any) -> bool:
    if isinstance(value, datetime.datetime | datetime.date) or _is_number(value):
        return True
    if not isinstance(value, str):
        return False
    try:
        parse_timestamp(value)
    except (ValueError, TypeError, OverflowError):
        return False
    return True


def _is_blob(value: Any) -> bool:
    return isinstance(value, bytes | bytearray | memoryview | str) or callable(getattr(value, "read", None))


def _anything(value: Any) -> bool:
    return True


_TYPE_CHECKS: Final = {
    "string": lambda value: isinstance(value, str),
    "integer": _is_int,
    "long": _is_int,
    "float": _is_number,
    "double": _is_number,
    "boolean": lambda value: isinstance(value, bool),
    "timestamp": _is_timestamp,
    "blob": _is_blob,
}


class _Walk:
    """One request's walk down its input shape, collecting violations into ``found``."""

    def __init__(self, service: str, found: list[Violation], unknown: Callable[[Any], bool] | None) -> None:
        self.service = service
        self.found = found
        self.unknown = unknown

    def add(self, path: str, message: str, value: Any, sensitive: bool) -> None:
        shown = MASK if sensitive and value is not None else value
        self.found.append(Violation(path, message, shown, sensitive))

    def value(self, shape: Shape, value: Any, path: str, sensitive: bool) -> None:
        if self.unknown is not None and self.unknown(value):
            return
        sensitive = sensitive or bool(shape.metadata.get("sensitive"))
        if isinstance(shape, StructureShape):
            self.structure(shape, value, path, sensitive=sensitive)
        elif isinstance(shape, ListShape):
            self.sequence(shape, value, path, sensitive)
        elif isinstance(shape, MapShape):
            self.mapping(shape, value, path, sensitive)
        else:
            problems = self.scalar(shape, value)
            for message in problems:
                self.add(path, message, value, sensitive)

    def structure(self, shape: StructureShape, value: Any, path: str, *, sensitive: bool) -> None:
        if shape.is_document_type:
            return
        if not isinstance(value, Mapping):
            self.add(path, "Member must be a structure", value, sensitive)
            return
        members = shape.members
        required = shape.required_members
        for name, member in members.items():
            item = value.get(name)
            if item is not None:
                self.value(member, item, _join(path, name), sensitive)
            elif name in required:
                self.add(_join(path, name), "Member must not be null", None, sensitive)
        for name, item in value.items():
            if name not in members:
                self.add(_join(path, name), f"Member is not a member of {shape.name}", item, sensitive)
        if shape.is_tagged_union and sum(value.get(name) is not None for name in members) != 1:
            hidden = sensitive or _holds_sensitive(shape)
            self.add(path, "Member must have exactly one member set", value, hidden)

    def sequence(self, shape: ListShape, value: Any, path: str, sensitive: bool) -> None:
        if not isinstance(value, list | tuple):
            self.add(path, "Member must be a list", value, sensitive)
            return
        for message in _length_problems(shape, len(value)):
            self.add(path, message, value, sensitive or _holds_sensitive(shape))
        for position, item in enumerate(value, start=1):
            if item is None:
                self.add(f"{path}.{position}", "Member must not be null", None, sensitive)
            else:
                self.value(shape.member, item, f"{path}.{position}", sensitive)

    def mapping(self, shape: MapShape, value: Any, path: str, sensitive: bool) -> None:
        if not isinstance(value, Mapping):
            self.add(path, "Member must be a map", value, sensitive)
            return
        hidden = sensitive or _holds_sensitive(shape)
        for message in _length_problems(shape, len(value)):
            self.add(path, message, value, hidden)
        key_shape, value_shape = shape.key, shape.value
        scalar = not isinstance(value_shape, StructureShape | ListShape | MapShape)
        bad_keys = bad_values = False
        for key, item in value.items():
            bad_keys = bad_keys or bool(self.scalar(key_shape, key))
            if item is None:
                self.add(f"{path}.{key}", "Member must not be null", None, sensitive)
            elif not scalar:
                self.value(value_shape, item, f"{path}.{key}", sensitive)
            elif not _TYPE_CHECKS.get(value_shape.type_name, _anything)(item):
                self.add(f"{path}.{key}", f"Member must be of type {value_shape.type_name}", item, sensitive)
            else:
                bad_values = bad_values or bool(self.scalar(value_shape, item))
        if bad_keys:
            self.add(path, f"Map keys must satisfy constraint: [{_constraints(key_shape)}]", value, hidden)
        if bad_values:
            self.add(path, f"Map value must satisfy constraint: [{_constraints(value_shape)}]", value, hidden)

    def scalar(self, shape: Shape, value: Any) -> list[str]:
        """What is wrong with a string, number, boolean, timestamp or blob ``value``."""
        kind = shape.type_name
        check = _TYPE_CHECKS.get(kind)
        if check is not None and not check(value):
            return [f"Member must be of type {kind}"]
        meta = shape.metadata
        problems: list[str] = []
        if kind == "string":
            in_bytes = (self.service, shape.name) in UTF8_LENGTHS
            problems.extend(_length_problems(shape, len(value.encode("utf-8")) if in_bytes else len(value)))
            pattern = meta.get("pattern")
            if pattern is not None:
                compiled = _compiled(pattern)
                if compiled is not None and compiled.fullmatch(value) is None:
                    problems.append(f"Member must satisfy regular expression pattern: {pattern}")
            enum = _enum(shape)
            if enum and value not in enum:
                problems.append(f"Member must satisfy enum value set: [{', '.join(enum)}]")
            limit = BYTE_LIMITS.get((self.service, shape.name))
            if limit is not None and len(value.encode("utf-8")) > limit[0]:
                problems.append(_byte_limit_message(limit[0]))
        elif kind in ("integer", "long", "float", "double"):
            if "max" in meta and value > meta["max"]:
                problems.append(f"Member must have value less than or equal to {meta['max']}")
            if "min" in meta and value < meta["min"]:
                problems.append(f"Member must have value greater than or equal to {meta['min']}")
        elif kind == "blob" and isinstance(value, bytes | bytearray | memoryview | str):
            size = len(value.encode("utf-8")) if isinstance(value, str) else memoryview(value).nbytes
            problems.extend(_length_problems(shape, size))
        return problems


@functools.cache
def _holds_sensitive(shape: Shape) -> bool:
    """Whether ``shape`` or anything beneath it is sensitive (its value is then never shown)."""
    return any(current.metadata.get("sensitive") for current in _reachable(shape))


def _enum(shape: Shape) -> list[str]:
    return shape.enum if isinstance(shape, StringShape) else []


def _length_problems(shape: Shape, length: int) -> list[str]:
    meta = shape.metadata
    problems = []
    if "max" in meta and length > meta["max"]:
        problems.append(f"Member must have length less than or equal to {meta['max']}")
    if "min" in meta and length < meta["min"]:
        problems.append(f"Member must have length greater than or equal to {meta['min']}")
    return problems


def _constraints(shape: Shape) -> str:
    """All of a scalar shape's constraints, as AWS lists them for a map's keys or values."""
    meta = shape.metadata
    numeric = shape.type_name in ("integer", "long", "float", "double")
    noun = "value" if numeric else "length"
    wording = []
    if "max" in meta:
        wording.append(f"Member must have {noun} less than or equal to {meta['max']}")
    if "min" in meta:
        wording.append(f"Member must have {noun} greater than or equal to {meta['min']}")
    if "pattern" in meta:
        wording.append(f"Member must satisfy regular expression pattern: {meta['pattern']}")
    if _enum(shape):
        wording.append(f"Member must satisfy enum value set: [{', '.join(_enum(shape))}]")
    return ", ".join(wording)
