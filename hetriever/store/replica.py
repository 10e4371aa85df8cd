"""Search state that any searcher can reach: the ingest publishes a manifest, followers copy.

The catalog (which collection is live, access levels, languages, exact titles) and the BM25
index live in the ingest's state directory. A search process on another machine that reaches
the same `chroma run` server has neither. With `follow` set, it keeps copies of its own:

- Every ingest run that records a commit, every migration switch and every forget *publishes*
  the repository's search view to `hetriever-manifest`, a one-row-per-repository Chroma
  collection: active collection, access level, settings, chunk access levels, a fresh version
  token.
- Before a search (at most every `follow_interval` seconds in a long-lived process), a follower
  reads the manifest (one request). For each repository whose token differs from the one it
  last followed, it brings its copy in step with Chroma, the one source of truth for chunks:
  the ids and metadata of every chunk are read (no texts, no vectors); rows that are new or
  whose metadata changed are fetched with their text and written to BM25; rows Chroma no longer
  holds are deleted; the exact-title rows and soft-deleted files of the files touched follow.
  A rebuild that switched the alias is a new collection: the old copy is dropped.

Why derived copies rather than a shared BM25 service: docs/scale-out.md (cold build and refresh
figures from bench/bench_follow.py).
"""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chromadb.errors import NotFoundError

from hetriever.core.clock import now_iso
from hetriever.core.logs import get_logger
from hetriever.core.redact import redact_url
from hetriever.store.catalog_records import DELETED, INDEXED
from hetriever.store.views import RepositoryViews

log = get_logger(__name__)

MANIFEST = "hetriever-manifest"
FOLLOWED = "followed:"  # catalog meta key prefix: the manifest version a repository follows
# What a manifest row carries for each repository (all strings: Chroma metadata values).
_FIELDS = (
    "collection",
    "access_level",
    "url",
    "settings",
    "levels",
    "fingerprint",
    "commit",
    "version",
    "published_at",
)
# A publish may name the files its run changed ("changed", JSON) and the version it follows
# ("previous"): a follower at that version then reads only those files' chunks. Longer lists
# are left out (the follower diffs the whole collection, which it does anyway after a full run).
MAX_CHANGED_PATHS = 5_000
COPIED = "copied"  # a follower's last "run": its copy of the ingest's state


@dataclass
class FollowReport:
    """What one follow pass changed."""

    checked: bool = False  # False: skipped, the last check is younger than follow_interval
    repositories: list[str] = field(default_factory=list)  # brought in step
    added: int = 0  # BM25 rows written (new or changed)
    removed: int = 0  # BM25 rows deleted
    dropped: list[str] = field(default_factory=list)  # repositories the ingest forgot
    seconds: float = 0.0
    followed_at: float | None = None  # when the manifest was read (time.monotonic())

    def to_dict(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "repositories": self.repositories,
            "added": self.added,
            "removed": self.removed,
            "dropped": self.dropped,
            "seconds": round(self.seconds, 3),
        }


def _manifest_for_writing(views: RepositoryViews) -> Any:
    client = views.chroma.client
    return views.chroma.call(
        "create_collection",
        lambda: client.get_or_create_collection(
            MANIFEST, embedding_function=None, metadata={"hetriever": "manifest"}
        ),
    )


def _manifest(views: RepositoryViews) -> Any | None:
    client = views.chroma.client
    try:
        return views.chroma.call(
            "get_collection", lambda: client.get_collection(MANIFEST, embedding_function=None)
        )
    except NotFoundError:
        return None


# --- the ingest side ------------------------------------------------------------------------


def _publish(views: RepositoryViews, repository: str, changed: list[str] | None = None) -> None:
    """Record `repository`'s search view in the manifest (server mode only: an embedded
    Chroma directory has no other readers). `changed`: every file whose chunks changed since
    the previous publish, when the caller knows them all (None: unknown).

    A failure is logged, never raised: the run's work is stored, and followers keep their
    previous view until the next publish."""
    if not views.settings.server_mode:
        return
    try:
        col = _manifest_for_writing(views)
        catalog = views.catalog
        physical = catalog.active(repository)
        if physical is None:
            views.chroma.call("delete", lambda: col.delete(ids=[repository]))
            log.info("manifest_published", repository=repository, collection=None)
            return
        record = catalog.repository(repository)
        collection = catalog.collection(physical)
        before = views.chroma.call("get", lambda: col.get(ids=[repository], include=["metadatas"]))
        previous = before["metadatas"][0] if before["ids"] and before["metadatas"] else None
        meta = {
            "collection": physical,
            "access_level": record.access_level if record else "PUBLIC",
            "url": redact_url(record.url) if record else "",  # an older catalog's too
            "settings": json.dumps(record.settings if record else {}, sort_keys=True),
            "levels": json.dumps(collection.levels if collection else []),
            "fingerprint": collection.fingerprint if collection else views.fingerprint(),
            "commit": record.last_commit if record else "",
            "version": uuid.uuid4().hex,
            "published_at": now_iso(),
        }
        if previous and changed is not None and len(changed) <= MAX_CHANGED_PATHS:
            meta["previous"] = str(previous.get("version", ""))
            meta["changed"] = json.dumps(sorted(set(changed)))
        views.chroma.call(
            "upsert",
            lambda: col.upsert(
                ids=[repository], embeddings=[[0.0]], documents=[""], metadatas=[meta]
            ),
        )
        log.info(
            "manifest_published",
            repository=repository,
            collection=physical,
            version=meta["version"],
        )
    except Exception as exc:
        log.warning(
            "manifest_publish_failed",
            repository=repository,
            error=f"{type(exc).__name__}: {exc}",
            hint="searchers that follow this server keep their previous view until "
            "the next run publishes",
        )


def _published(views: RepositoryViews) -> dict[str, dict[str, str]]:
    """repository -> its manifest row (empty when nothing was published)."""
    col = _manifest(views)
    if col is None:
        return {}
    got = views.chroma.call("get", lambda: col.get(include=["metadatas"]))
    out: dict[str, dict[str, str]] = {}
    for name, meta in zip(got["ids"], got["metadatas"] or []):
        if meta and all(k in meta for k in _FIELDS):
            out[str(name)] = {k: str(v) for k, v in meta.items()}
    return out


# --- the searcher side ----------------------------------------------------------------------


def _follow(views: RepositoryViews, last: float | None, *, force: bool = False) -> FollowReport:
    """Bring this state directory's catalog and BM25 in step with the manifest."""
    report = FollowReport()
    now = time.monotonic()
    if not force and last is not None and now - last < views.settings.follow_interval:
        return report
    began = time.perf_counter()
    report.checked = True
    manifest = _published(views)
    catalog = views.catalog
    for name, entry in sorted(manifest.items()):
        if catalog.noted(FOLLOWED + name) == entry["version"]:
            continue
        with views.writer_lock(name):
            held = catalog.noted(FOLLOWED + name)
            if held == entry["version"]:  # another process did it
                continue
            added, removed = _follow_repository(views, name, entry, held)
            catalog.note(FOLLOWED + name, entry["version"])
        report.repositories.append(name)
        report.added += added
        report.removed += removed
    for record in catalog.repositories():
        if record.name not in manifest and catalog.noted(FOLLOWED + record.name) is not None:
            _drop(views, record.name)
            report.dropped.append(record.name)
    report.followed_at = now
    report.seconds = time.perf_counter() - began
    if report.repositories or report.dropped:
        log.info("followed", **report.to_dict())
    return report


def _follow_repository(
    views: RepositoryViews, name: str, entry: dict[str, str], held_version: str | None
) -> tuple[int, int]:
    catalog = views.catalog
    physical = entry["collection"]
    catalog.upsert_repository(
        name,
        url=entry["url"],
        access_level=entry["access_level"],
        settings=json.loads(entry["settings"]),
    )
    replaced = catalog.adopt(
        name,
        physical,
        entry["fingerprint"],
        levels=json.loads(entry["levels"]),
        commit=entry["commit"],
    )
    if replaced:  # a rebuild switched the alias: the old copy goes
        _drop_collection(views, replaced)
    col = views.physical_collection(physical, name)
    if col is None:
        raise RuntimeError(f"the manifest names {physical!r}, which the server does not hold")
    index = views.bm25_physical(physical)
    if (
        not replaced
        and held_version
        and entry.get("previous") == held_version
        and "changed" in entry
    ):
        how, (written, deleted, files) = (
            "files",
            _copy_files(views, name, physical, col, index, json.loads(entry["changed"])),
        )
    elif index.count() == 0:
        how, (written, deleted, files) = "cold", _copy_all(views, name, physical, col, index)
    else:
        how, (written, deleted, files) = "diff", _diff_all(views, name, physical, col, index)
    # What /repositories shows as this copy's last run: when it was copied.
    with catalog.db.transaction() as conn:
        conn.execute(
            "UPDATE repositories SET last_run_at = ?, last_run_outcome = ? WHERE name = ?",
            (now_iso(), COPIED, name),
        )
    log.info(
        "repository_followed",
        repository=name,
        collection=physical,
        how=how,
        written=written,
        deleted=deleted,
        files=files,
    )
    return written, deleted


def _apply(
    views: RepositoryViews,
    index: Any,
    col: Any,
    stale: list[str],
    texts: dict[str, tuple[str, dict]],
    gone: list[str],
) -> None:
    """Write `stale` rows (from `texts` when at hand, else fetched a batch at a time) and
    delete `gone`, in one transaction. A row Chroma no longer holds when it is fetched is
    left out: the next follow sees it gone."""
    step = views.chroma.max_batch_size()
    with index.transaction():
        for start in range(0, len(stale), step):
            part = stale[start : start + step]
            rows = {d: texts[d] for d in part if d in texts}
            missing = [d for d in part if d not in rows]
            if missing:
                got = views.chroma.call(
                    "get", lambda: col.get(ids=missing, include=["documents", "metadatas"])
                )
                for doc_id, text, meta in zip(got["ids"], got["documents"], got["metadatas"]):
                    rows[doc_id] = (text, dict(meta or {}))
            ids = [d for d in part if d in rows]
            index.upsert(ids, [rows[d][0] for d in ids], [rows[d][1] for d in ids])
        if gone:
            index.delete(gone)


def _copy_all(
    views: RepositoryViews, name: str, physical: str, col: Any, index: Any
) -> tuple[int, int, int]:
    """An empty copy: every chunk with its text, a page at a time, in one transaction."""
    count = 0
    paths: set[str] = set()
    with index.transaction():
        for page in views.chroma.record_pages(col, ["documents", "metadatas"]):
            metas = [dict(m or {}) for m in page["metadatas"]]
            index.upsert(page["ids"], page["documents"], metas)
            count += len(page["ids"])
            paths.update(str(m.get("file_path", "")) for m in metas)
    paths.discard("")
    _follow_paths(views, name, physical, index, paths)
    return count, 0, len(paths)


def _diff_all(
    views: RepositoryViews, name: str, physical: str, col: Any, index: Any
) -> tuple[int, int, int]:
    """Every chunk's metadata against the copy, a page at a time; texts only of rows that
    differ."""
    seen: set[str] = set()
    stale: list[str] = []
    touched: set[str] = set()
    for page in views.chroma.record_pages(col, ["metadatas"]):
        held = index.metadata_of(page["ids"])
        for doc_id, meta in zip(page["ids"], page["metadatas"]):
            meta = dict(meta or {})
            seen.add(doc_id)
            if not _same(held.get(doc_id), meta):
                stale.append(doc_id)
                touched.add(str(meta.get("file_path", "")))
    gone = sorted(index.ids() - seen)
    touched |= {str(m.get("file_path", "")) for m in index.metadata_of(gone).values()}
    _apply(views, index, col, stale, {}, gone)
    touched.discard("")
    _follow_paths(views, name, physical, index, touched)
    return len(stale), len(gone), len(touched)


def _follow_paths(
    views: RepositoryViews, name: str, physical: str, index: Any, paths: set[str]
) -> None:
    """`_follow_files` for `paths`, from the copy just brought in step (it holds what Chroma
    holds), a group of files at a time."""
    ordered = sorted(paths)
    step = 500
    for start in range(0, len(ordered), step):
        group = ordered[start : start + step]
        metas = index.metadata_of(index.ids_where({"file_path": {"$in": group}}))
        _follow_files(views, name, physical, list(metas), list(metas.values()), set(group))


def _copy_files(
    views: RepositoryViews, name: str, physical: str, col: Any, index: Any, paths: list[str]
) -> tuple[int, int, int]:
    """Only the files the publish named: their chunks in Chroma against their rows here."""
    ids: list[str] = []
    metas: list[dict] = []
    texts: dict[str, tuple[str, dict]] = {}
    held_ids: set[str] = set()
    step = 100  # keep each `$in` list small
    for start in range(0, len(paths), step):
        part = paths[start : start + step]
        where = {"file_path": part[0]} if len(part) == 1 else {"file_path": {"$in": part}}
        got = views.chroma.all_records(col, ["documents", "metadatas"], where)
        for doc_id, text, meta in zip(got["ids"], got["documents"], got["metadatas"]):
            ids.append(doc_id)
            metas.append(dict(meta or {}))
            texts[doc_id] = (text, metas[-1])
        held_ids |= index.ids_where(where)
    held = index.metadata_of(held_ids)
    stale = [doc_id for doc_id, meta in zip(ids, metas) if not _same(held.get(doc_id), meta)]
    gone = sorted(held_ids - set(ids))
    _apply(views, index, col, stale, texts, gone)
    _follow_files(views, name, physical, ids, metas, set(paths))
    return len(stale), len(gone), len(paths)


def _same(held: dict | None, meta: dict) -> bool:
    if held is None:
        return False
    return json.dumps(held, sort_keys=True, default=str) == json.dumps(
        meta, sort_keys=True, default=str
    )


def _follow_files(
    views: RepositoryViews,
    name: str,
    physical: str,
    ids: list[str],
    metas: list[dict],
    touched: set[str],
) -> None:
    """Exact-title rows and soft-deleted files of the files a follow pass touched."""
    catalog = views.catalog
    chunks: dict[str, list[tuple[int, str, dict]]] = defaultdict(list)
    for doc_id, meta in zip(ids, metas):
        path = str(meta.get("file_path", ""))
        if path in touched:
            chunks[path].append((int(meta.get("chunk_index", 0)), doc_id, meta))
    deleted: list[str] = []
    live: list[str] = []
    counts: dict[str, int] = {}  # a live file's chunks, as the ingest counts them
    for path in sorted(touched):
        rows = sorted(chunks.get(path, []), key=lambda r: (r[0], r[1]))
        if rows and all(m.get("is_deleted") is True for _, _, m in rows):
            deleted.append(path)
            catalog.pages.set_page(physical, path)
            continue
        # The page's first body chunk, or its page record when it has no body (display_chunk).
        first = next((r for r in rows if not r[2].get("page_record")), rows[0] if rows else None)
        if first is None:
            catalog.remove_files(physical, [path])
            continue
        live.append(path)
        counts[path] = len(rows)
        catalog.pages.set_page(physical, path, first[1], first[2], [(r[1], r[2]) for r in rows])
    if live:
        catalog.set_files(physical, name, live, INDEXED, chunk_counts=counts)
    if deleted:
        catalog.set_files(physical, name, deleted, DELETED)


def _drop_collection(views: RepositoryViews, physical: str) -> None:
    views.forget(physical, bm25=True)
    views.catalog.drop_collection(physical)
    path: Path = views.bm25_file(physical)
    for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        leftover.unlink(missing_ok=True)


def _drop(views: RepositoryViews, name: str) -> None:
    catalog = views.catalog
    for collection in catalog.collections(name):
        _drop_collection(views, collection.name)
    catalog.drop_repository(name)
    catalog.note(FOLLOWED + name, None)
    log.info("repository_unfollowed", repository=name, reason="no longer in the manifest")


class Replica:
    """The manifest side of the store: what the ingest publishes and what a follower copies.
    Its own state: when this process last read the manifest."""

    def __init__(self, views: RepositoryViews) -> None:
        self.views = views
        self.followed_at: float | None = None  # this process's last manifest read

    def publish(self, repository: str, changed: list[str] | None = None) -> None:
        """Record `repository`'s search view in the manifest (server mode only: an embedded
        Chroma directory has no other readers). `changed`: every file whose chunks changed
        since the previous publish, when the caller knows them all (None: unknown).

        A failure is logged, never raised: the run's work is stored, and followers keep their
        previous view until the next publish."""
        _publish(self.views, repository, changed)

    def published(self) -> dict[str, dict[str, str]]:
        """repository -> its manifest row (empty when nothing was published)."""
        return _published(self.views)

    def follow(self, *, force: bool = False) -> FollowReport:
        """Bring this state directory's catalog and BM25 in step with the manifest (at most
        every `follow_interval` seconds, unless `force`)."""
        report = _follow(self.views, self.followed_at, force=force)
        if report.followed_at is not None:
            self.followed_at = report.followed_at
        return report

    def follow_quietly(self) -> FollowReport | None:
        """`follow` for a search: a server that does not answer leaves the copy as it was
        (the search then reports the server itself), it never fails the search here."""
        try:
            return self.follow()
        except Exception as exc:
            self.followed_at = time.monotonic()  # not on every call while the server is away
            log.warning(
                "follow_failed",
                error=f"{type(exc).__name__}: {exc}",
                hint="searches use the copy last followed until the server answers",
            )
            return None
