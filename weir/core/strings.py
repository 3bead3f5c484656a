"""Many short strings in one buffer: an index's collection ids and terms without a Python object per string.

At MS MARCO size an index has 8.8M collection ids and 2.7M terms; as Python strings in a list (and a dict to find
them) they cost about a gigabyte of memory per serving process and seconds to read. A :class:`StringTable` holds them
as the UTF-8 lines of their file, memory-mapped where the file is one (``docids.txt``, ``terms.txt``), plus the offset
of each line: a string is made only for the ones asked for (a query's terms, its hits' ids).

Order: UTF-8 byte order is code point order, which is Python's order of ``str``; so a table sorted by bytes
(Lucene's terms) is sorted as Python sorts, and :meth:`StringTable.order` sorts an unsorted one (collection ids) the
same way. Lookups are binary searches over bytes in compiled code (numba, the GIL released). A string may not hold a
newline (the files are one string a line).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numba
import numpy as np

NEWLINE = 10


@numba.njit(nogil=True, cache=True)
def _line_starts(buffer):
    count = 0
    for c in buffer:
        if c == NEWLINE:
            count += 1
    bounds = np.empty(count + 1, dtype=np.int64)
    bounds[0] = 0
    j = 1
    for i in range(len(buffer)):
        if buffer[i] == NEWLINE:
            bounds[j] = i + 1
            j += 1
    return bounds


@numba.njit(nogil=True, cache=True)
def _compare(buffer, start, end, key, key_start, key_end):
    """-1, 0 or 1 as buffer[start:end] sorts before, equal to or after key[key_start:key_end] (bytes)."""
    n, m = end - start, key_end - key_start
    for i in range(min(n, m)):
        a, b = buffer[start + i], key[key_start + i]
        if a != b:
            return -1 if a < b else 1
    if n == m:
        return 0
    return -1 if n < m else 1


@numba.njit(nogil=True, cache=True)
def _search(buffer, bounds, order, keys, key_bounds):
    """The ordinal of each key in the table (-1 when absent); ``order`` lists the ordinals sorted by string (empty:
    the table is sorted)."""
    n = len(bounds) - 1
    out = np.full(len(key_bounds) - 1, -1, dtype=np.int64)
    for q in range(len(key_bounds) - 1):
        ks, ke = key_bounds[q], key_bounds[q + 1] - 1
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            i = order[mid] if len(order) else mid
            if _compare(buffer, bounds[i], bounds[i + 1] - 1, keys, ks, ke) < 0:
                lo = mid + 1
            else:
                hi = mid
        if lo < n:
            i = order[lo] if len(order) else lo
            if _compare(buffer, bounds[i], bounds[i + 1] - 1, keys, ks, ke) == 0:
                out[q] = i
    return out


@numba.njit(nogil=True, cache=True)
def _gather(buffer, bounds, ordinals):
    """The lines of ``ordinals`` (each with its newline) in one buffer."""
    size = 0
    for i in ordinals:
        size += bounds[i + 1] - bounds[i]
    out = np.empty(size, dtype=np.uint8)
    at = 0
    for i in ordinals:
        a, b = bounds[i], bounds[i + 1]
        out[at:at + b - a] = buffer[a:b]
        at += b - a
    return out


@numba.njit(nogil=True, cache=True)
def _fixed_width(buffer, bounds, width):
    """Every string NUL-padded to ``width`` bytes, one row each (a numpy ``S`` array's memory)."""
    n = len(bounds) - 1
    out = np.zeros((n, max(width, 1)), dtype=np.uint8)
    for i in range(n):
        a, b = bounds[i], bounds[i + 1] - 1
        out[i, :b - a] = buffer[a:b]
    return out


def _encode(strings: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The lines of ``strings`` as (buffer, bounds)."""
    if any("\n" in s for s in strings):
        raise ValueError("a string holds a newline; a string table stores one string a line")
    data = "".join(s + "\n" for s in strings).encode("utf-8")
    buffer = np.frombuffer(data, dtype=np.uint8)
    return buffer, _line_starts(buffer)


class StringTable(Sequence):
    """Strings as the lines of one UTF-8 buffer: ``table[i]``, ``len``, :meth:`take` (many at once), :meth:`find`
    (binary search; ``sorted``: the strings are in byte order, as Lucene's terms are), :meth:`order`."""

    def __init__(self, buffer: np.ndarray, bounds: np.ndarray, *, sorted: bool = False):
        self.buffer, self.bounds, self.sorted = buffer, bounds, sorted
        self._order: np.ndarray | None = None

    @classmethod
    def of(cls, strings: Sequence[str], *, sorted: bool = False) -> StringTable:
        return cls(*_encode(strings), sorted=sorted)

    @classmethod
    def read(cls, path: Path, *, sorted: bool = False) -> StringTable:
        """The lines of a UTF-8 file, memory-mapped (every line, the last included, ends with a newline)."""
        size = Path(path).stat().st_size
        if not size:
            return cls(np.zeros(0, dtype=np.uint8), np.zeros(1, dtype=np.int64), sorted=sorted)
        buffer = np.asarray(np.memmap(path, dtype=np.uint8, mode="r"))
        if buffer[-1] != NEWLINE:
            raise ValueError(f"{path}: the last line has no newline (a truncated file?)")
        return cls(buffer, _line_starts(buffer), sorted=sorted)

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.take(np.arange(len(self))[i])
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"string {i} of a table of {n}")
        i %= n
        return self.buffer[self.bounds[i]:self.bounds[i + 1] - 1].tobytes().decode("utf-8")

    def __eq__(self, other) -> bool:
        if isinstance(other, StringTable):
            return np.array_equal(self.buffer, other.buffer)
        return isinstance(other, Sequence) and not isinstance(other, str) and list(self) == list(other)

    __hash__ = None

    def index(self, string: str, *args) -> int:
        """The ordinal of ``string`` (ValueError when the table does not hold it)."""
        if args:
            return super().index(string, *args)
        at = self.get(string)
        if at is None:
            raise ValueError(f"{string!r} is not in the table")
        return at

    def __iter__(self):
        return iter(self.take(np.arange(len(self))))

    def take(self, ordinals: np.ndarray | Sequence[int]) -> list[str]:
        """The strings of ``ordinals``, in their order."""
        ordinals = np.asarray(ordinals, dtype=np.int64)
        if not len(ordinals):
            return []
        return _gather(self.buffer, self.bounds, ordinals).tobytes().decode("utf-8").split("\n")[:-1]

    def find(self, strings: Sequence[str]) -> np.ndarray:
        """The ordinal of each of ``strings`` in the table, -1 for one it does not hold."""
        if not len(strings):
            return np.zeros(0, dtype=np.int64)
        if any("\n" in s for s in strings):  # never held; kept out of the keys' lines
            return np.array([-1 if "\n" in s else int(self.find([s])[0]) for s in strings], dtype=np.int64)
        keys, key_bounds = _encode(strings)
        order = np.zeros(0, dtype=np.int64) if self.sorted else self.order()
        return _search(self.buffer, self.bounds, order, keys, key_bounds)

    def get(self, string: str) -> int | None:
        """The ordinal of ``string``, or None."""
        at = int(self.find([string])[0])
        return None if at < 0 else at

    def utf8(self) -> np.ndarray:
        """The strings as a numpy ``S`` array (NUL-padded to the longest)."""
        if not len(self):
            return np.zeros(0, dtype="S1")
        width = int(np.diff(self.bounds).max()) - 1
        return _fixed_width(self.buffer, self.bounds, width).view(f"S{max(width, 1)}").ravel()

    def order(self) -> np.ndarray:
        """The ordinals sorted by string (byte order, ties by ordinal), computed once."""
        if self._order is None:
            if self.sorted:
                self._order = np.arange(len(self), dtype=np.int64)
            else:
                # an S array sorts by bytes, but ignores trailing NULs: a string ending in NUL ties with its prefix,
                # which the stable sort then orders by ordinal (weir's ids hold no NUL)
                self._order = np.argsort(self.utf8(), kind="stable").astype(np.int64)
        return self._order

    @property
    def nbytes(self) -> int:
        return self.buffer.nbytes + self.bounds.nbytes
