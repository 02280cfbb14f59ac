"""moto's ListObjectVersions without a copy of every object's bytes on every page.

moto answers each page by deep-copying every version of every key in the bucket (it marks the copies'
``is_latest``), and a key's deep copy reads its whole body and writes it into a new buffer. The live
stack's bucket holds every version of the checkpoints the jobs wrote (~134 MB each): saving the stack's
state, ten paginated listings, took 25 s where the same listing of the saved state took 2 s.
:func:`installed` makes a key's deep copy what the listing reads, its name, version, dates, ETag, size
and storage class, with an empty body of its own: the same answer, no bytes copied. (moto's copies were
also kept, bodies and all, in its list of every model instance until its reset.)
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def installed() -> Iterator[None]:
    """moto's S3 keys copied without their bodies while the context lasts."""
    from moto.s3.models import FakeKey

    def listing_copy(self: FakeKey, memo: dict[int, Any]) -> Any:
        self.etag  # noqa: B018 - computed once from the body, before the copy goes without it
        # Not through FakeKey.__new__: moto keeps every instance made that way until its reset.
        twin: Any = object.__new__(FakeKey)
        twin.__dict__.update(self.__dict__)
        # The twin's own empty buffer: disposing of it (moto does when it is collected) must not close
        # the stored key's. (A completed multipart upload's parts moto has closed already.)
        twin._value_buffer = tempfile.SpooledTemporaryFile(max_size=self._max_buffer_size)  # noqa: SIM115
        twin.lock = threading.Lock()
        twin.disposed = True
        memo[id(self)] = twin
        return twin

    had = "__deepcopy__" in FakeKey.__dict__
    original = FakeKey.__dict__.get("__deepcopy__")
    FakeKey.__deepcopy__ = listing_copy  # type: ignore[attr-defined]
    try:
        yield
    finally:
        if had:
            FakeKey.__deepcopy__ = original  # type: ignore[attr-defined]
        else:
            del FakeKey.__deepcopy__  # type: ignore[attr-defined]
