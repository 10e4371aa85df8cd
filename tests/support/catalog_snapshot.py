"""Every table and every column of a catalog, for comparing a recovered index with a clean one.

`catalog_rows(path, collection)` reads the catalog file itself (not through `Catalog`'s queries, which show
only part of it): each table by name, its rows sorted, every column but the few that differ
between two correct builds of the same commit. Those, and why:

- `repositories.last_run_at`, `collections.created_at`, `files.updated_at`: when a row was
  written; two builds never write at the same instant.
- `files.last_commit`: the commit of the run that last wrote the row; an incremental run leaves
  an unchanged file at the older commit (its chunks are the same).
- `repositories.next_generation`, `meta.alias_epoch`: counters of generations allocated and of
  switches so far, which a repository's history (a migration, a rebuilt catalog) moves on.
- `collections.index_state`'s `last_updated` (it is kept as JSON; the rest is compared key by
  key): when the commit was recorded.
- `meta` keys `index_location` and `state_location` (where this store's own directories are:
  two stores never share them) and `windows_checked:*` (when publish windows were last looked
  at).
- `runs`: a build's history, not its state (a recovered index has the crashed run before its
  own); what must hold of it is kept instead: no run left `running`, and the last run's
  repository, collection, new commit, outcome and error.
- `sqlite_sequence`: SQLite's counter of run ids.

Only the served collection's rows are read (`collection`): a generation a migration left
behind is the business of the tests that look for it (`generations()` in
tests/e2e/test_crash_points.py). Its name (`<repo>_v<generation>`) reads `<served>` and the
`collections.generation` column is left out: a migration serves the same index from a later
generation.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

EXCLUDED_COLUMNS: dict[str, set[str]] = {
    "repositories": {"last_run_at", "next_generation"},
    "collections": {"created_at", "generation"},
    "files": {"updated_at", "last_commit"},
}
EXCLUDED_META_KEYS = {"alias_epoch", "index_location", "state_location"}
EXCLUDED_META_PREFIXES = ("windows_checked:",)
EXCLUDED_INDEX_STATE = {"last_updated"}
SKIPPED_TABLES = {"sqlite_sequence", "runs"}
# Chroma collection metadata: when the commit was recorded.
EXCLUDED_COLLECTION_METADATA = {"last_updated"}


SERVED = "<served>"


def catalog_rows(path: Path, collection: str) -> dict[str, Any]:
    """Every table of the catalog at `path` as seen for the served `collection`."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        out: dict[str, Any] = {}
        for table in tables:
            if table in SKIPPED_TABLES:
                continue
            columns = [
                r[1]
                for r in conn.execute(f"PRAGMA table_info({table})")
                if r[1] not in EXCLUDED_COLUMNS.get(table, set())
            ]
            key = {"collections": "name"}.get(table, "collection")
            where = f" WHERE {key} = ?" if key in columns else ""
            rows = conn.execute(
                f"SELECT {', '.join(columns)} FROM {table}{where}", (collection,) if where else ()
            ).fetchall()
            rows = [tuple(SERVED if v == collection else v for v in r) for r in rows]
            if table == "meta":
                rows = [
                    r
                    for r in rows
                    if r[0] not in EXCLUDED_META_KEYS
                    and not r[0].startswith(EXCLUDED_META_PREFIXES)
                ]
            if "index_state" in columns:
                at = columns.index("index_state")
                rows = [(*r[:at], _index_state(r[at]), *r[at + 1 :]) for r in rows]
            out[table] = sorted(rows, key=repr)
        runs = conn.execute(
            "SELECT repository, ?, new_commit, outcome, error, id FROM runs "
            "WHERE collection = ? ORDER BY id",
            (SERVED, collection),
        ).fetchall()
        last: dict[str, tuple] = {}
        for row in runs:
            last[row[0]] = row[:5]
        out["runs"] = {
            "running": [r[:2] for r in runs if r[3] == "running"],
            "last": sorted(last.values()),
        }
        return out
    finally:
        conn.close()


def _index_state(raw: str) -> tuple:
    return tuple(
        sorted((k, v) for k, v in json.loads(raw or "{}").items() if k not in EXCLUDED_INDEX_STATE)
    )


def collection_metadata(meta: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (meta or {}).items() if k not in EXCLUDED_COLLECTION_METADATA}
