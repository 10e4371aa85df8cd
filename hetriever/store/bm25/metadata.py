"""Chunk metadata as the in-memory BM25 index holds it: one list per key, values shared.

Filters and results read a chunk's metadata from here (`ChunkMetadata[slot]`, a view), and
compaction keeps the live slots (`take`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

_UNSHARED_KEYS = frozenset({"content_hash"})  # one value per chunk: nothing to share
_ABSENT = object()  # a key this chunk's metadata does not have


def _held(key: str, value: Any) -> Any:
    """How a metadata value is held: strings interned (every chunk of a page repeats its
    repository, path, title, description, URL and section), lists as tuples, so that holding
    them shares one copy across chunks."""
    if type(value) is str:
        return value if key in _UNSHARED_KEYS else sys.intern(value)
    if type(value) is list:
        return tuple(_held(key, v) for v in value)
    return value


def _given(value: Any) -> Any:
    return list(value) if type(value) is tuple else value


class _MetaRow(Mapping):
    """One chunk's metadata, read from the columns (a view: nothing is copied)."""

    __slots__ = ("_columns", "_slot")

    def __init__(self, columns: dict[str, list], slot: int):
        self._columns = columns
        self._slot = slot

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, _ABSENT)
        if value is _ABSENT:
            raise KeyError(key)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        column = self._columns.get(key)
        value = _ABSENT if column is None else column[self._slot]
        return default if value is _ABSENT else _given(value)

    def __iter__(self) -> Iterator[str]:
        slot = self._slot
        return (key for key, column in self._columns.items() if column[slot] is not _ABSENT)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class ChunkMetadata:
    """Per-chunk metadata held as one list per key instead of one dict per chunk.

    A dict of ~17 keys costs ~0.7 KB per chunk; a column slot costs 8 bytes, and the values
    themselves are shared (`_held`). Measured at 100k chunks in bench/README.md ("Memory")."""

    def __init__(self) -> None:
        self._columns: dict[str, list] = {}
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, slot: int) -> _MetaRow:
        return _MetaRow(self._columns, slot)

    def dict_of(self, slot: int) -> dict:
        """A copy of one chunk's metadata, in one pass over the columns."""
        return {
            key: _given(value)
            for key, column in self._columns.items()
            if (value := column[slot]) is not _ABSENT
        }

    def fields_of(self, slot: int, keys: Sequence[str]) -> dict:
        """`keys` of one chunk's metadata (those it has)."""
        out = {}
        for key in keys:
            column = self._columns.get(key)
            if column is not None and (value := column[slot]) is not _ABSENT:
                out[key] = _given(value)
        return out

    def append(self, meta: Mapping) -> None:
        n = self._n
        for key, value in meta.items():
            column = self._columns.get(key)
            if column is None:
                column = self._columns[sys.intern(key)] = [_ABSENT] * n
            column.append(_held(key, value))
        self._n = n + 1
        for column in self._columns.values():
            if len(column) == n:
                column.append(_ABSENT)

    def column(self, key: str) -> list:
        """Every slot's value of `key` (`_ABSENT` where a chunk lacks it), not copied."""
        return self._columns.get(key) or [_ABSENT] * self._n

    def take(self, slots: Iterable[int]) -> ChunkMetadata:
        """The metadata of `slots`, in that order (compaction)."""
        slots = list(slots)
        out = ChunkMetadata()
        for key, column in self._columns.items():
            kept = [column[s] for s in slots]
            if any(v is not _ABSENT for v in kept):
                out._columns[key] = kept
        out._n = len(slots)
        return out
