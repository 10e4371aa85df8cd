"""The catalog's publish windows: per file, the publish and expiry dates that decide whether
Hugo publishes it (`hetriever.discover.publish_rules`), so a run can find the files whose window a
date crossed since the last run, with no commit to say so. A part of `Catalog`
(`catalog.publish_windows`) over its database.

Dates are kept as UTC ISO strings (`2026-11-18T00:00:00+00:00`), compared as text.
"""

from __future__ import annotations

from collections.abc import Mapping

from hetriever.store.catalog_schema import CatalogDatabase

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
    """The windows table of the catalog."""

    def __init__(self, db: CatalogDatabase) -> None:
        self.db = db

    def set_windows(self, collection: str, windows: Mapping[str, Window]) -> None:
        """Record each file's window; a None window forgets the file's row."""
        keep = [(collection, p, w[0], w[1]) for p, w in windows.items() if w is not None]
        drop = [(collection, p) for p, w in windows.items() if w is None]
        if not keep and not drop:
            return
        with self.db.transaction() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO windows(collection, path, publish_at, "
                "expire_at) VALUES (?, ?, ?, ?)",
                keep,
            )
            conn.executemany("DELETE FROM windows WHERE collection = ? AND path = ?", drop)

    def windows(self, collection: str) -> dict[str, tuple[str, str]]:
        return {
            r["path"]: (r["publish_at"], r["expire_at"])
            for r in self.db.rows(
                "SELECT path, publish_at, expire_at FROM windows WHERE collection = ?",
                (collection,),
            )
        }

    def crossed(self, collection: str, since: str, now: str) -> list[str]:
        """Files whose publish or expiry date passed between `since` and `now` (published at
        one and not the other): they must be processed again."""
        return sorted(
            path
            for path, window in self.windows(collection).items()
            if open_at(window, since) != open_at(window, now)
        )

    def windows_checked(self, collection: str) -> str:
        """When the collection's windows were last brought up to date ("" never)."""
        return self.db.noted(_checked_key(collection)) or ""

    def mark_windows_checked(self, collection: str, moment: str) -> None:
        self.db.note(_checked_key(collection), moment)
