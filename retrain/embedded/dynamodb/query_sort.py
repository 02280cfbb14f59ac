"""moto's Query and Scan sorts, keyed by each item's key values read once.

For every Query and Scan moto sorts all of the table's items by their keys (``Table.all_items``), and an
index query sorts its candidates again by the index's keys (``Table.sorted_items``); both compare
DynamoType objects, and each comparison re-reads the values it compares (``cast_value``, a property).
The dispatch check after each ingest batch makes three ``Limit``ed queries of the ledger's pending index;
with the demo's uploads in the ledger, those queries were the largest share of the server's time while a
wave was recorded (BENCHMARKS.md). :func:`installed` sorts by the values themselves, read once per item:
the same order (a key attribute has one type in every item of a table), the same pages.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def _all_items(self: Any) -> list[Any]:
    if self.range_key_attr:
        items = [item for hash_set in self.items.values() for item in hash_set.values()]
    else:
        items = list(self.items.values())

    def key(item: Any) -> Any:
        # moto's own key: (hash, range) where the item has a range key, else the hash key alone
        if item.range_key:
            return (item.hash_key.cast_value, item.range_key.cast_value)
        return item.hash_key.cast_value

    return sorted(items, key=key)


def _sorted_items(
    self: Any, hash_key_attrs: list[str], range_key_attrs: list[str | None], items: list[Any]
) -> list[Any]:
    attributes = self._generate_attr_to_sort_by(hash_key_attrs, range_key_attrs)
    items.sort(key=lambda item: tuple(item.attrs[name].cast_value for name in attributes))
    return items


@contextmanager
def installed() -> Iterator[None]:
    """moto's queries and scans sorted by plain key values while the context lasts."""
    from moto.dynamodb.models.table import Table

    patches = {"all_items": _all_items, "sorted_items": _sorted_items}
    originals = {name: Table.__dict__[name] for name in patches}
    for name, patch in patches.items():
        setattr(Table, name, patch)
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(Table, name, original)
