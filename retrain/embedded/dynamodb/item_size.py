"""DynamoDB's 400 KB item limit, counted as DynamoDB counts it, for every write moto serves.

DynamoDB refuses a PutItem (and a BatchWriteItem, TransactWriteItems or PartiQL write) whose item is over
:data:`~retrain.embedded.limits.DYNAMODB_ITEM_BYTES` with ValidationException "Item size has exceeded the
maximum allowed size", and an UpdateItem whose result would be with "Item size to update has exceeded the
maximum allowed size". moto 5.2.5 estimates on its own (``LimitedSizeDict``: 405,000 bytes, numbers by
their characters, binaries by their base64, no list or map overhead) and only when a top-level
attribute is set, so a nested ``SET m.k = :big`` passes. :func:`installed` turns that estimate off and
measures the whole item instead: before a put (``Table.put_item``, which batch, transaction and PartiQL
writes go through) and after an update (``DynamoDBBackend.update_item``, whose item is restored when
refused).
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

from retrain.embedded.limits import DYNAMODB_ITEM_BYTES

_ADVICE: Final = "keep large data in S3 and store its URI in the item"


def _utf8(text: str) -> int:
    return len(text.encode("utf-8"))


def _binary(value: Any) -> int:
    """A binary's raw length; the wire (and moto) carry it base64-encoded."""
    if isinstance(value, bytes | bytearray):
        return len(value)
    return len(base64.b64decode(value))


def _number(value: str) -> int:
    """About one byte per two significant digits, plus one (leading and trailing zeros trimmed)."""
    mantissa = value.strip().lstrip("+-").lower().split("e", 1)[0].replace(".", "")
    digits = len(mantissa.strip("0"))
    return (digits + 1) // 2 + 1


# Scalar types by their DynamoDB JSON name; a set (SS, NS, BS) is the sum of its members.
_SCALARS: Final[Mapping[str, Callable[[Any], int]]] = {
    "S": _utf8,
    "N": _number,
    "B": _binary,
    "BOOL": lambda _: 1,
    "NULL": lambda _: 1,
}


def value_bytes(value: Mapping[str, Any]) -> int:
    """The size of one attribute value in DynamoDB's JSON (``{"S": ...}``), by DynamoDB's rules: strings in
    UTF-8, binaries raw, null and booleans 1 byte, lists and maps 3 bytes plus 1 per element."""
    (kind, data), *_ = value.items()
    if kind in _SCALARS:
        return _SCALARS[kind](data)
    if kind in ("SS", "NS", "BS"):
        return sum(_SCALARS[kind[0]](member) for member in data)
    if kind == "L":
        return 3 + sum(value_bytes(element) + 1 for element in data)
    if kind == "M":
        return 3 + sum(_utf8(name) + value_bytes(element) + 1 for name, element in data.items())
    raise ValueError(f"not a DynamoDB attribute value: {dict(value)!r}")


def item_bytes(item: Mapping[str, Mapping[str, Any]]) -> int:
    """An item's size: its attribute names in UTF-8 plus their values."""
    return sum(_utf8(name) + value_bytes(value) for name, value in item.items())


def _key(table: Any, item: Mapping[str, Any]) -> dict[str, Any]:
    names = [table.hash_key_attr, table.range_key_attr]
    return {name: item[name] for name in names if name and name in item}


def _too_large(prefix: str, table: Any, item: Mapping[str, Any], size: int) -> Exception:
    from moto.dynamodb.exceptions import MockValidationException

    return MockValidationException(
        f"{prefix} has exceeded the maximum allowed size (the item of table {table.name} with key "
        f"{_key(table, item)} is {size} bytes, over {DYNAMODB_ITEM_BYTES}: {_ADVICE})"
    )


def _checked_put(original: Callable[..., Any]) -> Callable[..., Any]:
    def put_item(self: Any, item_attrs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        size = item_bytes(item_attrs)
        if size > DYNAMODB_ITEM_BYTES:
            raise _too_large("Item size", self, item_attrs, size)
        return original(self, item_attrs, *args, **kwargs)

    return put_item


def _checked_update(original: Callable[..., Any]) -> Callable[..., Any]:
    def update_item(self: Any, table_name: str, key: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        table = self.get_table(table_name)
        before = copy.deepcopy(self.get_item(table_name, key))
        item = original(self, table_name, key, *args, **kwargs)
        attributes = item.to_json()["Attributes"]
        size = item_bytes(attributes)
        if size > DYNAMODB_ITEM_BYTES:
            _restore(table, item, before)
            raise _too_large("Item size to update", table, attributes, size)
        return item

    return update_item


def _restore(table: Any, updated: Any, before: Any) -> None:
    """Put the item an update changed back as it was (or remove the one it created)."""
    hash_key, range_key = updated.hash_key, updated.range_key
    holder, slot = (table.items[hash_key], range_key) if range_key is not None else (table.items, hash_key)
    if before is None:
        del holder[slot]
    else:
        holder[slot] = before


@contextmanager
def installed() -> Iterator[None]:
    """DynamoDB's item limit on every write moto serves while the context lasts."""
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.dynamo_type import LimitedSizeDict
    from moto.dynamodb.models.table import Table

    patches: list[tuple[type, str, Any]] = [
        (LimitedSizeDict, "__setitem__", dict.__setitem__),
        (Table, "put_item", _checked_put(Table.__dict__["put_item"])),
        (DynamoDBBackend, "update_item", _checked_update(DynamoDBBackend.__dict__["update_item"])),
    ]
    originals = [(owner, name, owner.__dict__[name]) for owner, name, _ in patches]
    for owner, name, patch in patches:
        setattr(owner, name, patch)
    try:
        yield
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
