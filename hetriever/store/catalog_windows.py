"""The catalog's publish windows: per file, the publish and expiry dates that decide whether
Hugo publishes it (`hetriever.discover.publish_rules`), so a run can find the files whose window a
date crossed since the last run, with no commit to say so. A mixin of `Catalog`.

Dates are kept as UTC ISO strings (`2026-11-18T00:00:00+00:00`), compared as text.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

WINDOWS_SCHEMA = """
CREATE TABLE IF NOT EXISTS windows (
    collection TEXT NOT NULL,
    path TEXT NOT NULL,
    publish_at TEXT NOT NULL DEFAULT '',
    expire_at TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (collection, path)
);
"""
# A window: (publish_at, expire_at), "" for no date; None when time cannot change the file.
Window = tuple[str, str] | None


def open_at(window: tuple[str, str], moment: str) -> bool:
    """Whether a page with this window is published at `moment` (Hugo: not before its publish
    date, not after its expiry date)."""
    publish, expire = window
    return (not publish or publish <= moment) and (not expire or moment <= expire)


def _checked_key(collection: str) -> str:
    return f"windows_checked:{collection}"


class PublishWindows:
    """The windows table of a `Catalog`; needs the host's `transaction()`, `_rows()`,
    `noted()` and `note()`."""

    if TYPE_CHECKING:  # given by the host class
        def transaction(self) -> AbstractContextManager[sqlite3.Connection]: ...
        def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]: ...
        def noted(self, key: str) -> str | None: ...
        def note(self, key: str, value: str | None) -> None: ...

    def set_windows(self, collection: str, windows: Mapping[str, Window]) -> None:
        """Record each file's window; a None window forgets the file's row."""
        keep = [(collection, p, w[0], w[1]) for p, w in windows.items() if w is not None]
        drop = [(collection, p) for p, w in windows.items() if w is None]
        if not keep and not drop:
            return
        with self.transaction() as conn:
            conn.executemany("INSERT OR REPLACE INTO windows(collection, path, publish_at, "
                             "expire_at) VALUES (?, ?, ?, ?)", keep)
            conn.executemany("DELETE FROM windows WHERE collection = ? AND path = ?", drop)

    def windows(self, collection: str) -> dict[str, tuple[str, str]]:
        return {r["path"]: (r["publish_at"], r["expire_at"]) for r in self._rows(
            "SELECT path, publish_at, expire_at FROM windows WHERE collection = ?",
            (collection,))}

    def crossed(self, collection: str, since: str, now: str) -> list[str]:
        """Files whose publish or expiry date passed between `since` and `now` (published at
        one and not the other): they must be processed again."""
        return sorted(path for path, window in self.windows(collection).items()
                      if open_at(window, since) != open_at(window, now))

    def windows_checked(self, collection: str) -> str:
        """When the collection's windows were last brought up to date ("" never)."""
        return self.noted(_checked_key(collection)) or ""

    def mark_windows_checked(self, collection: str, moment: str) -> None:
        self.note(_checked_key(collection), moment)
