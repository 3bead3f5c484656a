"""One bounded cache for what rerankers derive per document (token states, calibration scores, analyzed terms).

A reranker asks for a batch of keys at once and computes the missing ones in one call (one forward pass, one Lucene
read). Whatever the cache's size, every key asked is answered: values are read or computed before anything is
dropped, so a batch larger than the cache (a deep run over a large collection) never finds its own entries gone.
Thread-safe: several pipelines of one server share a reranker, and so its caches.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any


class LruCache:
    """Values per key, the least recently used dropped beyond ``size`` entries."""

    def __init__(self, size: int):
        if size < 0:
            raise ValueError(f"a cache size is at least 0 (got {size})")
        self.size = size
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def get_many(self, keys: Sequence[Hashable], compute: Callable[[list], Sequence[Any]]) -> list:
        """The value of each of ``keys`` (repeats allowed), in order; ``compute(missing)`` gives the values of the
        keys not held, in the order given, in one call (made without the lock)."""
        with self._lock:
            held = {k: self._items[k] for k in dict.fromkeys(keys) if k in self._items}
        missing = [k for k in dict.fromkeys(keys) if k not in held]
        if missing:
            values = list(compute(missing))
            if len(values) != len(missing):
                raise ValueError(f"computed {len(values)} values for {len(missing)} keys")
            held.update(zip(missing, values))
        with self._lock:
            for k in dict.fromkeys(keys):
                self._items[k] = held[k]
                self._items.move_to_end(k)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return [held[k] for k in keys]
