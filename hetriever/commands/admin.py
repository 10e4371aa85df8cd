"""Looking after indexes: `status`, `metrics`, `purge`, `forget`, `migrate`."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from typing import Any

from hetriever.commands import reserve
from hetriever.commands.common import (EXIT_OK, cli_settings, index_location, index_problem,
                                       make_console, note_location, print_json, require_index)


def status_rows(settings, repos, *, fetch: bool = False) -> list[dict[str, Any]]:
    """Per repository: checked-out and indexed commit, what waits upstream (the followed
    remote branch at the last fetch, or fetched now with `fetch`), files, chunks, failures,
    last run.

    The catalog is the source of truth; the collection metadata fills in for a repository the
    catalog has not seen (an index made before it existed). Where no ingest has written an
    index yet, every repository is "never indexed" and nothing is created.
    """
    from hetriever.store.catalog import DELETED, FAILED, INDEXED, SKIPPED
    from hetriever.discover.changes import head_commit
    from hetriever.discover.upstream import Upstream, upstream
    from hetriever.core.redact import redact_text
    from hetriever.core.errors import SourceError
    from hetriever.index.lifecycle import needs_migration
    from hetriever.core.names import is_valid_repository_name
    from hetriever.search.knowledge_store import get_knowledge_store

    problem = index_problem(settings)
    if problem:  # a fresh setup, or a mistyped path: the rows say "never indexed", and why
        print(f"hetriever: note: {problem}", file=sys.stderr)
    store = None if problem else get_knowledge_store(settings)
    rows = []
    for repo in repos:
        if not is_valid_repository_name(repo.name):  # it has no index: only its problem
            rows.append({
                "repository": repo.name, "checked_out": "", "indexed_commit": "",
                "up_to_date": False, "status": "unusable", "error": redact_text(repo.problem),
                "collection": "", "bm25_problem": "",
                "access_level": settings.access_levels.get(repo.name, "PUBLIC"),
                "files": 0, "chunks": 0, "skipped": 0, "skipped_reasons": {}, "failures": 0,
                "failed_files": [],
                "soft_deleted_files": 0, "last_run": "", "last_run_outcome": "",
                "last_updated": "", "needs_migration": False, **Upstream().to_dict()})
            continue
        meta = (asyncio.run(store.get_collection_metadata(repo.name)) or {}) if store else {}
        record = store.catalog.repository(repo.name) if store else None
        physical = store.physical_name(repo.name) if store else None
        counts = store.catalog.file_counts(physical) if store and physical else {}
        failures = store.catalog.files(physical, FAILED) if store and physical else []
        skips = store.catalog.files(physical, SKIPPED) if store and physical else []
        try:
            head, error = head_commit(repo), ""
        except SourceError as exc:  # e.g. no commits, a bad submodule: this row says so
            head, error = "", str(exc)
        indexed = (record.last_commit if record and record.last_commit
                   else meta.get("commit_hash", ""))
        # What search warns about, status says: a complete index whose BM25 side is damaged,
        # missing or empty answers dense-only until the next ingest rebuilds it.
        bm25 = (store.bm25_problem(repo.name) if store and physical else None) or ""
        status = _index_status(meta, record)
        waiting = upstream(repo, indexed, fetch_first=fetch) if head else Upstream()
        rows.append({
            "repository": repo.name,
            "checked_out": head,
            "indexed_commit": indexed,
            "up_to_date": bool(indexed) and indexed == head,
            "status": "degraded" if bm25 and status == "complete" else status,
            "error": redact_text(error),
            "bm25_problem": bm25,
            "collection": physical or "",
            "access_level": record.access_level if record else
            settings.access_levels.get(repo.name, "PUBLIC"),
            "files": counts.get(INDEXED, meta.get("total_documents", 0)),
            "chunks": meta.get("total_chunks", 0),
            "skipped": counts.get(SKIPPED, 0),
            # by rule: "draft", "expired", "not rendered", "snippet (not a page)", ...
            "skipped_reasons": dict(Counter(f.reason.split(":")[0].strip() for f in skips)),
            "failures": len(failures),
            "failed_files": [{"path": f.path, "reason": redact_text(f.reason)} for f in failures],
            "soft_deleted_files": counts.get(DELETED, 0),
            "last_run": record.last_run_at if record else "",
            "last_run_outcome": record.last_run_outcome if record else "",
            "last_updated": meta.get("last_updated", ""),
            "needs_migration": bool(store and physical) and needs_migration(store, repo.name),
            **waiting.to_dict(),
        })
    return rows


def _index_status(meta: dict[str, Any], record: Any) -> str:
    """The collection's state; "incomplete" rather than "indexing" once its last run ended
    without finishing (interrupted, failed): no run is indexing it, the next one completes it."""
    status = str(meta.get("index_status", "never indexed"))
    ended = record.last_run_outcome if record else ""
    return "incomplete" if status == "indexing" and ended not in ("", "running") else status


def cmd_status(args: argparse.Namespace) -> int:
    from hetriever.discover.repositories import configured_repositories

    settings = cli_settings(args)
    repos = configured_repositories(settings)
    where = index_location(settings)
    note_location(settings)
    rows = reserve.reading(settings, lambda: status_rows(settings, repos, fetch=args.fetch),
                           lambda warning: print(f"hetriever: warning: {warning}",
                                                 file=sys.stderr))
    if args.json:
        print_json([{**row, "index": where} for row in rows])
        return EXIT_OK
    from rich.table import Table

    table = Table(title=f"status of {where}")
    for col in ("repository", "checked out", "indexed", "upstream", "status", "files",
                "chunks", "failures", "last run"):
        table.add_column(col)
    for r in rows:
        mark = "[green]✓[/green]" if r["up_to_date"] else "[yellow]behind[/yellow]"
        status = r["status"] + (" [red]migrate[/red]" if r["needs_migration"] else "")
        if r["error"]:
            mark, status = "[red]error[/red]", f"{status} [red]{r['error'][:80]}[/red]"
        elif r["bm25_problem"]:
            status = f"[red]{status}[/red]: BM25 index unusable, dense-only until an ingest"
        table.add_row(r["repository"], r["checked_out"][:12],
                      f"{r['indexed_commit'][:12]} {mark}", upstream_cell(r), status,
                      str(r["files"]), str(r["chunks"]), str(r["failures"]),
                      f"{r['last_run']} {r['last_run_outcome']}".strip())
    make_console().print(table)
    for r in rows:
        if r["upstream_error"] and r["indexed_commit"]:
            print(f"hetriever: note: {r['repository']}: {r['upstream_error']}", file=sys.stderr)
        if r["upstream_note"]:
            print(f"hetriever: note: {r['repository']}: {r['upstream_note']}", file=sys.stderr)
    if any(r["behind_upstream"] for r in rows):
        print("hetriever: note: commits wait upstream: the next fetching run (the schedule, "
              "or a push webhook at once) indexes them", file=sys.stderr)
    return EXIT_OK


def upstream_cell(row: dict[str, Any]) -> str:
    """"✓ origin/main", "behind by 3 (origin/main a1b2c3d4e5f6)", "?" or "" (no remote)."""
    if not row["upstream_ref"]:
        return ""
    if row["behind_upstream"] is None:
        return f"[dim]? {row['upstream_ref']}[/dim]"
    if row["ahead_of_upstream"]:  # the branch was moved back, or rewritten
        moved = "moved back" if row["behind_upstream"] == 0 else "diverged"
        return (f"[red]{moved}[/red] ({row['upstream_ref']} {row['upstream_commit'][:12]}, "
                f"{row['ahead_of_upstream']} indexed commit(s) not on it)")
    if row["behind_upstream"] == 0:
        return f"[green]✓[/green] {row['upstream_ref']}"
    return (f"[yellow]behind by {row['behind_upstream']}[/yellow] ({row['upstream_ref']} "
            f"{row['upstream_commit'][:12]})")


def cmd_purge(args: argparse.Namespace) -> int:
    from hetriever.index.lifecycle import purge
    from hetriever.search.knowledge_store import get_knowledge_store

    settings = cli_settings(args)
    require_index(settings)
    report = asyncio.run(purge(get_knowledge_store(settings), args.older_than))
    if args.json:
        print_json({**report.to_dict(), "total_chunks": report.total_chunks})
    else:
        make_console().print(f"purged {report.total_chunks} soft-deleted chunks deleted before "
                             f"{report.cutoff}: {report.chunks}; catalog files removed: "
                             f"{report.files}")
    return EXIT_OK


def cmd_forget(args: argparse.Namespace) -> int:
    from hetriever.index.lifecycle import forget
    from hetriever.core.names import repository_name
    from hetriever.search.knowledge_store import get_knowledge_store

    settings = cli_settings(args)
    require_index(settings)
    name = repository_name(args.repository)  # `opentelemetry.io` for opentelemetry-io
    report = asyncio.run(forget(get_knowledge_store(settings), name, args.file))
    if args.json:
        print_json(report.to_dict())
    else:
        what = f"{report.repository}:{report.file}" if report.file else report.repository
        make_console().print(f"forgot {what}: {report.chunks} chunks, {report.bm25_rows} BM25 rows "
                             f"from {', '.join(report.collections) or 'no collection'}; catalog "
                             f"rows {report.catalog_rows}")
    return EXIT_OK


def cmd_migrate(args: argparse.Namespace) -> int:
    from hetriever.index.lifecycle import migrate_repository
    from hetriever.discover.repositories import configured_repositories
    from hetriever.search.knowledge_store import get_knowledge_store

    settings = cli_settings(args)
    repos = configured_repositories(settings, args.repository)
    store = get_knowledge_store(settings)
    reports = [asyncio.run(migrate_repository(r, store, settings, force=args.force))
               for r in repos]
    if args.json:
        print_json([r.to_dict() for r in reports])
    else:
        for r in reports:
            make_console().print(f"{r.repository}: " + (
                f"{r.old_collection} -> {r.new_collection}, dropped {r.dropped_chunks} chunks"
                if r.migrated else r.reason))
    return EXIT_OK


def cmd_metrics(args: argparse.Namespace) -> int:
    from hetriever.search.metrics import metrics_store

    settings = cli_settings(args)
    store = metrics_store(settings.resolved_state_dir)
    summary = store.summary(last=args.last, source=args.source, temperature=args.temperature)
    store.close()
    if args.json:
        print_json(summary.to_dict())
        return EXIT_OK
    from rich.table import Table

    console = make_console()
    console.print(f"queries: {summary.count}  p50: {summary.p50_ms} ms  "
                  f"p95: {summary.p95_ms} ms  p99: {summary.p99_ms} ms  "
                  f"mean results: {summary.mean_results}  empty: {summary.empty_rate}  "
                  f"by mode: {summary.by_mode}")
    if summary.by_source:
        table = Table(title=f"by source; cold: a process's first search, start-up included "
                            f"({settings.resolved_state_dir.absolute()})")
        for col in ("source", "temperature", "queries", "p50 ms", "p95 ms", "p99 ms"):
            table.add_column(col)
        for row in summary.by_source:
            table.add_row(row["source"], row["temperature"], str(row["count"]),
                          str(row["p50_ms"]), str(row["p95_ms"]), str(row["p99_ms"]))
        console.print(table)
    return EXIT_OK
