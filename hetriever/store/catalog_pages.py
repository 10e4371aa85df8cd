"""The catalog's page keys: the exact-match titles that name a page and the keys of the pages it
links to (`hetriever.parse.links`), replaced together per file and read by search. They are one idea
apart from the repositories, collections, files and runs: a part of `Catalog` (`catalog.pages`)
over its database.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from hetriever.core.sqlite_files import in_batches
from hetriever.parse.links import links_of
from hetriever.store.catalog_records import (
    TITLE_KINDS,
    TitleHit,
    address_key,
    heading_keys,
    normalise_title,
    title_keys,
)
from hetriever.store.catalog_schema import CatalogDatabase


class PageKeys:
    """The titles and links tables of the catalog."""

    def __init__(self, db: CatalogDatabase) -> None:
        self.db = db

    # -- links between pages (hetriever.parse.links) -----------------------------------------

    def link_sources(self, collection: str, keys: Iterable[str]) -> dict[str, set[str]]:
        """{key: the files linking to it} for those of `keys` that some file links to."""
        out: dict[str, set[str]] = {}
        for part in in_batches(list(keys)):
            marks = ",".join("?" * len(part))
            for r in self.db.rows(
                f"SELECT key, path FROM links WHERE collection = ? AND key IN ({marks})",
                (collection, *part),
            ):
                out.setdefault(r["key"], set()).add(r["path"])
        return out

    # -- exact-match titles -------------------------------------------------------------

    def set_page(
        self,
        collection: str,
        path: str,
        chunk_id: str = "",
        metadata: dict[str, Any] | None = None,
        sections: Iterable[tuple[str, Any]] = (),
    ) -> None:
        """Replace the exact-match keys and the outbound links of the file at `path`, in one
        transaction, from the metadata of the chunk that stands for its page
        (`page_records.display_chunk`) and its chunks' (id, metadata) for the section
        headings (`heading_keys`); without a chunk (skipped, failed, deleted) all go."""
        keys: list[tuple[str, str, str]] = []
        if metadata:
            keys = [(kind, key, chunk_id) for kind, key in title_keys(metadata)] + [
                ("heading", key, section) for key, section in heading_keys(sections)
            ]
        with self.db.transaction() as conn:
            _replace_titles(conn, collection, path, keys)
            _replace_links(conn, collection, path, links_of(metadata) if metadata else ())

    def lookup_title(
        self, query: str, collections: Sequence[str], kinds: Sequence[str] = ()
    ) -> list[TitleHit]:
        """Pages whose normalised title/linkTitle/function name/URL/alias/description/section
        heading equals the query's (an address, such as a pasted URL, by `address_key`), one
        hit per page under its best kind, best kind first, within `collections` (and `kinds`,
        if given). A description or heading names a page only when no other page the caller
        may return has it: the caller applies `drop_shared` to those it keeps."""
        address = address_key(query)
        keys = {k for k in (normalise_title(query), address) if k}
        # Alias paths a catalog wrote before addresses had their leading slash, too.
        legacy = {address[1:]} - keys if address else set()
        wanted = sorted(keys | legacy)
        if not wanted or not collections:
            return []
        key_marks, marks = ",".join("?" * len(wanted)), ",".join("?" * len(collections))
        kind_clause = f" AND kind IN ({','.join('?' * len(kinds))})" if kinds else ""
        rows = self.db.rows(
            f"SELECT * FROM titles WHERE key IN ({key_marks}) AND collection IN "
            f"({marks}){kind_clause} ORDER BY priority, collection, path",
            (*wanted, *collections, *kinds),
        )
        hits: dict[tuple[str, str], TitleHit] = {}
        for r in rows:  # one hit per page, under its best kind
            if r["key"] in legacy and r["kind"] != "alias":
                continue
            hits.setdefault(
                (r["collection"], r["path"]),
                TitleHit(
                    collection=r["collection"],
                    key=r["key"],
                    kind=r["kind"],
                    path=r["path"],
                    chunk_id=r["chunk_id"],
                ),
            )
        return list(hits.values())


def _replace_titles(
    conn: sqlite3.Connection, collection: str, path: str, keys: Iterable[tuple[str, str, str]]
) -> None:
    """`keys`: (kind, key, chunk id) rows of the file."""
    conn.execute("DELETE FROM titles WHERE collection = ? AND path = ?", (collection, path))
    conn.executemany(
        "INSERT OR REPLACE INTO titles(collection, key, kind, priority, path,"
        " chunk_id) VALUES (?, ?, ?, ?, ?, ?)",
        [(collection, key, kind, TITLE_KINDS[kind], path, chunk) for kind, key, chunk in keys],
    )


def _replace_links(
    conn: sqlite3.Connection, collection: str, path: str, keys: Iterable[str]
) -> None:
    conn.execute("DELETE FROM links WHERE collection = ? AND path = ?", (collection, path))
    conn.executemany(
        "INSERT OR IGNORE INTO links(collection, path, key) VALUES (?, ?, ?)",
        [(collection, path, key) for key in keys],
    )
