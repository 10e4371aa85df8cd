"""The catalog: a small SQLite database beside the Chroma data that says what is indexed.

`<state_dir>/catalog.sqlite` holds
- repositories: name, url, access level, settings, last indexed commit, last run, and the
  *alias* pointer to the physical Chroma collection that searches read (`active_collection`);
- collections: every physical collection (`<repo>_v<generation>`), the schema fingerprint it
  was built with, its state (building / active) and the access levels its chunks carry;
- files: per collection, each content file's blob, commit, state
  (DISCOVERED -> PROCESSED -> INDEXED / SKIPPED / FAILED, or DELETED while soft-deleted), the
  reason for a skip or failure, and its chunk count;
- runs: one row per index run with its outcome and counts;
- titles: the exact-match index, normalised title / linkTitle / alias / function name /
  description -> the page's first chunk, section heading -> the chunk its section starts in;
- links: per collection and file, the keys of the pages it links to (`hetriever.parse.links`).

Switching a repository to a new collection is one UPDATE (plus an epoch bump), so a reader sees
either the old or the new collection, never a half-built one. Every write is one short
transaction; WAL lets searches read while an ingest writes.

Every table is defined in `catalog_schema`; the titles and links (the page keys) are read and
written by the catalog's part `catalog_pages.PageKeys`, the publish windows by
`catalog_windows.PublishWindows`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hetriever.core.clock import now_iso
from hetriever.core.logs import get_logger
from hetriever.core.redact import redact_url
from hetriever.core.sqlite_files import in_batches
from hetriever.store.catalog_pages import PageKeys
from hetriever.store.catalog_records import (
    ACTIVE,
    BUILDING,
    DELETED,
    FILE_STATES,
    INDEX_STATE_KEYS,
    INDEXED,
    CollectionRecord,
    FileRecord,
    RepositoryRecord,
    generation_collection_name,
    split_physical,
)
from hetriever.store.catalog_schema import CATALOG_FILE, PER_FILE_TABLES, CatalogDatabase
from hetriever.store.catalog_windows import PublishWindows

log = get_logger(__name__)


class Catalog:
    """One SQLite catalog; safe to share between threads (one connection behind a lock).
    Its page keys are `pages` and its publish windows `publish_windows`, parts sharing its
    database (`catalog_schema.CatalogDatabase`)."""

    def __init__(self, path: Path) -> None:
        self.db = CatalogDatabase(path)
        self.path = self.db.path
        self.pages = PageKeys(self.db)
        self.publish_windows = PublishWindows(self.db)

    @classmethod
    def for_state_dir(cls, state_dir: Path) -> Catalog:
        return cls(Path(state_dir) / CATALOG_FILE)

    def close(self) -> None:
        self.db.close()

    # -- repositories and the alias pointer ------------------------------------------

    def upsert_repository(
        self,
        name: str,
        *,
        url: str | None = None,
        access_level: str | None = None,
        settings: dict[str, Any] | None = None,
    ) -> None:
        with self.db.transaction() as conn:
            conn.execute("INSERT OR IGNORE INTO repositories(name) VALUES (?)", (name,))
            if url is not None:  # a copy of the catalog is a way out too: never a password
                conn.execute(
                    "UPDATE repositories SET url = ? WHERE name = ?", (redact_url(url), name)
                )
            if access_level is not None:
                conn.execute(
                    "UPDATE repositories SET access_level = ? WHERE name = ?",
                    (access_level.upper(), name),
                )
            if settings is not None:
                conn.execute(
                    "UPDATE repositories SET settings = ? WHERE name = ?",
                    (json.dumps(settings, sort_keys=True, default=str), name),
                )

    def set_last_commit(self, name: str, commit: str) -> None:
        """The commit the repository's searched collection holds (what `status` shows)."""
        with self.db.transaction() as conn:
            conn.execute("INSERT OR IGNORE INTO repositories(name) VALUES (?)", (name,))
            conn.execute("UPDATE repositories SET last_commit = ? WHERE name = ?", (commit, name))

    def repository(self, name: str) -> RepositoryRecord | None:
        rows = self.db.rows("SELECT * FROM repositories WHERE name = ?", (name,))
        if not rows:
            return None
        r = rows[0]
        # redacted on the way out too: an older version stored URLs as git holds them
        return RepositoryRecord(
            name=r["name"],
            url=redact_url(r["url"] or ""),
            access_level=r["access_level"],
            settings=json.loads(r["settings"] or "{}"),
            active_collection=r["active_collection"],
            last_commit=r["last_commit"],
            last_run_at=r["last_run_at"],
            last_run_outcome=r["last_run_outcome"],
        )

    def complete(self, name: str) -> bool:
        """Whether `name`'s index is whole: a run finished with its commit recorded, or no run
        recorded at all (an index written before the catalog kept runs). A first ingest that
        started and never completed (running, crashed, failed) leaves it partial."""
        record = self.repository(name)
        return record is None or bool(record.last_commit) or not self.runs(name, limit=1)

    def repositories(self) -> list[RepositoryRecord]:
        names = [r["name"] for r in self.db.rows("SELECT name FROM repositories ORDER BY name")]
        return [rec for rec in (self.repository(n) for n in names) if rec is not None]

    def version_settings(self) -> dict[str, dict[str, Any]]:
        """name -> its `version_of`, `version` and `ref` settings, for every repository whose
        settings have a `version_of` (`hetriever.core.versions`): one read, the JSON picked
        apart by SQLite."""
        rows = self.db.rows(
            "SELECT name, json_extract(settings, '$.version_of') AS version_of,"
            " json_extract(settings, '$.version') AS version,"
            " json_extract(settings, '$.ref') AS ref FROM repositories"
            " WHERE json_valid(settings) AND json_extract(settings, '$.version_of') IS NOT NULL"
            " ORDER BY name"
        )
        return {
            r["name"]: {"version_of": r["version_of"], "version": r["version"], "ref": r["ref"]}
            for r in rows
        }

    def file_blobs(self, collection: str, paths: Iterable[str]) -> dict[str, str]:
        """path -> blob of those of `paths` the collection holds indexed."""
        out: dict[str, str] = {}
        for part in in_batches(list(paths)):
            marks = ",".join("?" * len(part))
            for r in self.db.rows(
                f"SELECT path, blob FROM files WHERE collection = ? AND state = ?"
                f" AND path IN ({marks})",
                (collection, INDEXED, *part),
            ):
                out[r["path"]] = r["blob"]
        return out

    def active(self, repository: str) -> str | None:
        rows = self.db.rows(
            "SELECT active_collection FROM repositories WHERE name = ?", (repository,)
        )
        return rows[0]["active_collection"] if rows else None

    def active_map(self) -> dict[str, str]:
        """repository -> active physical collection, for every searchable repository."""
        rows = self.db.rows(
            "SELECT name, active_collection FROM repositories "
            "WHERE active_collection IS NOT NULL ORDER BY name"
        )
        return {r["name"]: r["active_collection"] for r in rows}

    def alias_epoch(self) -> int:
        """Bumped on every switch or drop: a reader that saw the same epoch before and after
        its work read one consistent set of collections."""
        return int(self.db.rows("SELECT value FROM meta WHERE key = 'alias_epoch'")[0]["value"])

    def _bump(self, conn: sqlite3.Connection) -> None:
        conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'alias_epoch'")

    def allocate(self, repository: str, fingerprint: str, *, activate: bool) -> str:
        """A new physical collection for `repository` (`<repo>_v<n>`, n never reused).

        `activate` points the alias at it at once (first build: nothing to hide); otherwise it
        stays `building` until `switch()`.
        """
        with self.db.transaction() as conn:
            conn.execute("INSERT OR IGNORE INTO repositories(name) VALUES (?)", (repository,))
            gen = int(
                conn.execute(
                    "SELECT next_generation FROM repositories WHERE name = ?", (repository,)
                ).fetchone()[0]
            )
            name = generation_collection_name(repository, gen)
            conn.execute(
                "UPDATE repositories SET next_generation = ? WHERE name = ?", (gen + 1, repository)
            )
            conn.execute(
                "INSERT INTO collections(name, repository, generation, fingerprint, "
                "state, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (name, repository, gen, fingerprint, ACTIVE if activate else BUILDING, now_iso()),
            )
            if activate:
                conn.execute(
                    "UPDATE repositories SET active_collection = ? WHERE name = ?",
                    (name, repository),
                )
                self._bump(conn)
        log.info("collection_allocated", repository=repository, collection=name, active=activate)
        return name

    def ensure_active(self, repository: str, fingerprint: str) -> str:
        """The repository's active collection, allocating (and activating) one if none."""
        current = self.active(repository)
        return current if current else self.allocate(repository, fingerprint, activate=True)

    def switch(self, repository: str, collection: str) -> str | None:
        """Point the alias at `collection` (one UPDATE); returns the previous collection."""
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT active_collection FROM repositories WHERE name = ?", (repository,)
            ).fetchone()
            previous = row[0] if row else None
            conn.execute(
                "UPDATE repositories SET active_collection = ? WHERE name = ?",
                (collection, repository),
            )
            conn.execute("UPDATE collections SET state = ? WHERE name = ?", (ACTIVE, collection))
            # The repository's last run is now the one that built this collection.
            run = conn.execute(
                "SELECT finished_at, outcome, new_commit FROM runs WHERE "
                "collection = ? AND outcome = 'ok' ORDER BY id DESC LIMIT 1",
                (collection,),
            ).fetchone()
            if run is not None:
                conn.execute(
                    "UPDATE repositories SET last_run_at = ?, last_run_outcome = ?, "
                    "last_commit = ? WHERE name = ?",
                    (*run, repository),
                )
            self._bump(conn)
        log.info("alias_switched", repository=repository, old=previous, new=collection)
        return previous

    def adopt(
        self,
        repository: str,
        collection: str,
        fingerprint: str,
        *,
        levels: Iterable[str],
        commit: str = "",
    ) -> str | None:
        """Make `collection`, built by an ingest elsewhere, the repository's active collection
        (a follower's copy of the alias); returns the collection it replaced, if another."""
        split = split_physical(collection)
        if split is None or split[0] != repository:
            raise ValueError(f"{collection!r} is not a collection of {repository!r}")
        with self.db.transaction() as conn:
            conn.execute("INSERT OR IGNORE INTO repositories(name) VALUES (?)", (repository,))
            conn.execute(
                "INSERT OR IGNORE INTO collections(name, repository, generation, "
                "fingerprint, state, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (collection, repository, split[1], fingerprint, ACTIVE, now_iso()),
            )
            # Only complete collections are published, so the copy is complete at `commit`.
            conn.execute(
                "UPDATE collections SET levels = ?, state = ?, index_state = ? WHERE name = ?",
                (
                    json.dumps(sorted({str(v).upper() for v in levels})),
                    ACTIVE,
                    json.dumps({"commit_hash": commit, "index_status": "complete"}),
                    collection,
                ),
            )
            row = conn.execute(
                "SELECT active_collection FROM repositories WHERE name = ?", (repository,)
            ).fetchone()
            previous = row[0] if row else None
            conn.execute(
                "UPDATE repositories SET active_collection = ?, last_commit = ?, "
                "next_generation = MAX(next_generation, ?) WHERE name = ?",
                (collection, commit, split[1] + 1, repository),
            )
            if previous != collection:
                self._bump(conn)
        return previous if previous != collection else None

    def noted(self, key: str) -> str | None:
        """A value kept in the catalog's meta table by `note` (None when never noted)."""
        return self.db.noted(key)

    def note(self, key: str, value: str | None) -> None:
        self.db.note(key, value)

    def collection(self, name: str) -> CollectionRecord | None:
        rows = self.db.rows("SELECT * FROM collections WHERE name = ?", (name,))
        if not rows:
            return None
        r = rows[0]
        return CollectionRecord(
            name=r["name"],
            repository=r["repository"],
            generation=r["generation"],
            fingerprint=r["fingerprint"],
            state=r["state"],
            levels=json.loads(r["levels"]),
            created_at=r["created_at"],
            index_state=json.loads(r["index_state"] or "{}"),
        )

    def index_state(self, collection: str) -> dict[str, Any]:
        """The collection's commit, status and totals as recorded ({} when never set)."""
        record = self.collection(collection)
        return dict(record.index_state) if record else {}

    def set_index_state(self, collection: str, **fields: Any) -> dict[str, Any]:
        """Merge `fields` into the collection's index state (None removes a key)."""
        unknown = set(fields) - INDEX_STATE_KEYS
        if unknown:
            raise ValueError(f"not index state: {', '.join(sorted(unknown))}")
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT index_state FROM collections WHERE name = ?", (collection,)
            ).fetchone()
            if row is None:
                raise KeyError(collection)
            state = {**json.loads(row[0] or "{}"), **fields}
            if state.get("repository_url"):
                state["repository_url"] = redact_url(state["repository_url"])
            state = {k: v for k, v in state.items() if v is not None}
            conn.execute(
                "UPDATE collections SET index_state = ? WHERE name = ?",
                (json.dumps(state, sort_keys=True), collection),
            )
        return state

    def collections(self, repository: str | None = None) -> list[CollectionRecord]:
        sql = "SELECT name FROM collections" + (" WHERE repository = ?" if repository else "")
        rows = self.db.rows(
            sql + " ORDER BY repository, generation", (repository,) if repository else ()
        )
        return [c for c in (self.collection(r["name"]) for r in rows) if c is not None]

    def note_levels(self, collection: str, levels: Iterable[str]) -> None:
        """Record access levels seen on chunks written to `collection` (a superset: it only
        grows until the collection is rebuilt, so it can over-filter, never under-filter)."""
        new = {str(level).upper() for level in levels}
        if not new:
            return
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT levels FROM collections WHERE name = ?", (collection,)
            ).fetchone()
            if row is None:
                return
            have = set(json.loads(row[0]))
            if new <= have:
                return
            conn.execute(
                "UPDATE collections SET levels = ? WHERE name = ?",
                (json.dumps(sorted(have | new)), collection),
            )

    def drop_collection(self, name: str) -> None:
        """Forget a physical collection: its row, files, titles and links; clears an alias to
        it. Its runs stay, as history; one still `running` (its process died) is
        `interrupted`: it can never finish now."""
        with self.db.transaction() as conn:
            for table in ("files", *PER_FILE_TABLES):
                conn.execute(f"DELETE FROM {table} WHERE collection = ?", (name,))
            conn.execute(
                "UPDATE runs SET outcome = 'interrupted' WHERE collection = ? AND "
                "outcome = 'running'",
                (name,),
            )
            conn.execute("DELETE FROM collections WHERE name = ?", (name,))
            conn.execute(
                "UPDATE repositories SET active_collection = NULL WHERE active_collection = ?",
                (name,),
            )
            self._bump(conn)

    def drop_repository(self, name: str) -> dict[str, int]:
        """Forget everything about a repository; returns row counts removed per table."""
        removed: dict[str, int] = {}
        with self.db.transaction() as conn:
            cols = [
                r[0]
                for r in conn.execute("SELECT name FROM collections WHERE repository = ?", (name,))
            ]
            marks = ",".join("?" * len(cols))
            for table in ("files", *PER_FILE_TABLES):
                removed[table] = (
                    conn.execute(
                        f"DELETE FROM {table} WHERE collection IN ({marks})", cols
                    ).rowcount
                    if cols
                    else 0
                )
            removed["collections"] = conn.execute(
                "DELETE FROM collections WHERE repository = ?", (name,)
            ).rowcount
            removed["runs"] = conn.execute(
                "DELETE FROM runs WHERE repository = ?", (name,)
            ).rowcount
            removed["repositories"] = conn.execute(
                "DELETE FROM repositories WHERE name = ?", (name,)
            ).rowcount
            self._bump(conn)
        return removed

    # -- files ------------------------------------------------------------------------

    def set_files(
        self,
        collection: str,
        repository: str,
        paths: Iterable[str],
        state: str,
        *,
        commit: str = "",
        blobs: dict[str, str] | None = None,
        reason: str = "",
        chunk_counts: dict[str, int] | None = None,
    ) -> None:
        if state not in FILE_STATES:
            raise ValueError(f"unknown file state {state!r}")
        stamp = now_iso()
        blobs, chunk_counts = blobs or {}, chunk_counts or {}
        rows = [
            (
                collection,
                repository,
                p,
                blobs.get(p, ""),
                commit,
                state,
                reason,
                int(chunk_counts.get(p, 0)),
                stamp,
            )
            for p in paths
        ]
        if not rows:
            return
        with self.db.transaction() as conn:
            conn.executemany(
                "INSERT INTO files(collection, repository, path, blob, last_commit, state, reason,"
                " chunk_count, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(collection, path) DO UPDATE SET"
                " blob = CASE WHEN excluded.blob != '' THEN excluded.blob ELSE files.blob END,"
                " last_commit = CASE WHEN excluded.last_commit != '' THEN excluded.last_commit"
                " ELSE files.last_commit END,"
                " state = excluded.state, reason = excluded.reason,"
                " chunk_count = excluded.chunk_count, deleted_at = '',"
                " updated_at = excluded.updated_at",
                rows,
            )

    def mark_deleted(self, collection: str, paths: Iterable[str], deleted_at: str) -> None:
        """Soft delete: the rows stay (for audit and purge), their titles and links go."""
        paths = list(paths)
        with self.db.transaction() as conn:
            conn.executemany(
                "UPDATE files SET state = ?, deleted_at = ?, updated_at = ? "
                "WHERE collection = ? AND path = ?",
                [(DELETED, deleted_at, deleted_at, collection, p) for p in paths],
            )
            for table in PER_FILE_TABLES:
                conn.executemany(
                    f"DELETE FROM {table} WHERE collection = ? AND path = ?",
                    [(collection, p) for p in paths],
                )

    def remove_files(self, collection: str, paths: Iterable[str]) -> int:
        paths = list(paths)
        with self.db.transaction() as conn:
            n = 0
            for p in paths:
                n += conn.execute(
                    "DELETE FROM files WHERE collection = ? AND path = ?", (collection, p)
                ).rowcount
                for table in PER_FILE_TABLES:
                    conn.execute(
                        f"DELETE FROM {table} WHERE collection = ? AND path = ?", (collection, p)
                    )
        return n

    def prune(self, collection: str, chunk_ids: set[str], files: set[str]) -> int:
        """Forget title rows of chunks, and INDEXED files and link rows of files, that the
        collection no longer holds
        (left by a run that died between its Chroma write and its catalog update)."""
        with self.db.transaction() as conn:
            stale_titles = [
                (collection, r["chunk_id"])
                for r in conn.execute(
                    "SELECT DISTINCT chunk_id FROM titles WHERE collection = ?", (collection,)
                )
                if r["chunk_id"] not in chunk_ids
            ]
            conn.executemany(
                "DELETE FROM titles WHERE collection = ? AND chunk_id = ?", stale_titles
            )
            stale_files = [
                (collection, r["path"])
                for r in conn.execute(
                    "SELECT path FROM files WHERE collection = ? AND state = ?",
                    (collection, INDEXED),
                )
                if r["path"] not in files
            ]
            conn.executemany("DELETE FROM files WHERE collection = ? AND path = ?", stale_files)
            stale_links = [
                (collection, r["path"])
                for r in conn.execute(
                    "SELECT DISTINCT path FROM links WHERE collection = ?", (collection,)
                )
                if r["path"] not in files
            ]
            conn.executemany("DELETE FROM links WHERE collection = ? AND path = ?", stale_links)
        return len(stale_titles) + len(stale_files) + len(stale_links)

    def files(self, collection: str, state: str | None = None) -> list[FileRecord]:
        sql = "SELECT * FROM files WHERE collection = ?" + (" AND state = ?" if state else "")
        rows = self.db.rows(sql + " ORDER BY path", (collection, state) if state else (collection,))
        return [
            FileRecord(
                collection=r["collection"],
                repository=r["repository"],
                path=r["path"],
                state=r["state"],
                blob=r["blob"],
                last_commit=r["last_commit"],
                reason=r["reason"],
                chunk_count=r["chunk_count"],
                deleted_at=r["deleted_at"],
                updated_at=r["updated_at"],
            )
            for r in rows
        ]

    def file_counts(self, collection: str) -> dict[str, int]:
        """state -> number of files, plus `chunks` (chunks of INDEXED files)."""
        out = {state: 0 for state in FILE_STATES}
        for r in self.db.rows(
            "SELECT state, COUNT(*) AS n, SUM(chunk_count) AS c FROM files "
            "WHERE collection = ? GROUP BY state",
            (collection,),
        ):
            out[r["state"]] = int(r["n"])
            if r["state"] == INDEXED:
                out["chunks"] = int(r["c"] or 0)
        out.setdefault("chunks", 0)
        return out

    def has_deleted(self, collection: str) -> bool:
        return bool(
            self.db.rows(
                "SELECT 1 FROM files WHERE collection = ? AND state = ? LIMIT 1",
                (collection, DELETED),
            )
        )

    # -- runs -------------------------------------------------------------------------

    def start_run(
        self,
        repository: str,
        collection: str,
        *,
        mode: str,
        old_commit: str | None,
        new_commit: str,
    ) -> int:
        with self.db.transaction() as conn:
            # A run still "running" here was cut short (a crash or a kill): say so.
            conn.execute(
                "UPDATE runs SET outcome = 'interrupted' WHERE repository = ? AND "
                "collection = ? AND outcome = 'running'",
                (repository, collection),
            )
            cur = conn.execute(
                "INSERT INTO runs(repository, collection, mode, old_commit, "
                "new_commit, started_at) VALUES (?, ?, ?, ?, ?, ?)",
                (repository, collection, mode, old_commit or "", new_commit, now_iso()),
            )
            assert cur.lastrowid is not None  # an INSERT always sets it
            return int(cur.lastrowid)

    def finish_run(
        self,
        run_id: int,
        *,
        outcome: str,
        counts: dict[str, Any] | None = None,
        error: str = "",
        commit: str | None = None,
    ) -> None:
        stamp = now_iso()
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE runs SET finished_at = ?, outcome = ?, counts = ?, error = ? WHERE id = ?",
                (stamp, outcome, json.dumps(counts or {}, default=str), error, run_id),
            )
            row = conn.execute(
                "SELECT repository, collection FROM runs WHERE id = ?", (run_id,)
            ).fetchone()
            if row is None:
                return
            # Only runs of the searched collection describe the repository's index.
            active = conn.execute(
                "SELECT active_collection FROM repositories WHERE name = ?", (row[0],)
            ).fetchone()
            if active is not None and active[0] == row[1]:
                conn.execute(
                    "UPDATE repositories SET last_run_at = ?, last_run_outcome = ? WHERE name = ?",
                    (stamp, outcome, row[0]),
                )
                if commit is not None:
                    conn.execute(
                        "UPDATE repositories SET last_commit = ? WHERE name = ?", (commit, row[0])
                    )

    def runs(self, repository: str, limit: int = 20) -> list[dict[str, Any]]:
        rows = self.db.rows(
            "SELECT * FROM runs WHERE repository = ? ORDER BY id DESC LIMIT ?", (repository, limit)
        )
        return [{**dict(r), "counts": json.loads(r["counts"] or "{}")} for r in rows]
