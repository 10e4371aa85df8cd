"""Looking after indexes: `status`, `metrics`, `purge`, `forget`, `migrate`."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from typing import Any

from hetriever.commands import reserve, resident
from hetriever.commands.common import (
    EXIT_OK,
    cli_settings,
    index_location,
    index_problem,
    make_console,
    note_location,
    print_json,
    require_index,
)
from hetriever.core.access import declared_level
from hetriever.core.terminal import terminal_safe


def status_rows(settings, repos, *, fetch: bool = False) -> list[dict[str, Any]]:
    """Per repository: checked-out and indexed commit, what waits upstream (the followed
    remote branch at the last fetch, or fetched now with `fetch`), files, chunks, failures,
    last run.

    The catalog is the source of truth; the collection metadata fills in for a repository the
    catalog has not seen (an index made before it existed). Where no ingest has written an
    index yet, every repository is "never indexed" and nothing is created.
    """
    from hetriever.core.names import is_valid_repository_name
    from hetriever.core.redact import redact_text
    from hetriever.discover.upstream import Upstream
    from hetriever.index.lifecycle import needs_migration
    from hetriever.index.status import repository_status
    from hetriever.store.catalog_records import DELETED, FAILED, SKIPPED
    from hetriever.store.knowledge_store import get_knowledge_store

    problem = index_problem(settings)
    if problem:  # a fresh setup, or a mistyped path: the rows say "never indexed", and why
        print(f"hetriever: note: {terminal_safe(problem)}", file=sys.stderr)
    store = None if problem else get_knowledge_store(settings)
    rows = []
    for repo in repos:
        if not is_valid_repository_name(repo.name):  # it has no index: only its problem
            rows.append(
                {
                    "repository": repo.name,
                    "checked_out": "",
                    "indexed_commit": "",
                    "up_to_date": False,
                    "status": "unusable",
                    "error": redact_text(repo.problem),
                    "collection": "",
                    "bm25_problem": "",
                    "access_level": declared_level(
                        settings, repo.name, base=repo.version.base if repo.version else None
                    ),
                    "files": 0,
                    "chunks": 0,
                    "skipped": 0,
                    "skipped_reasons": {},
                    "failures": 0,
                    "failed_files": [],
                    "soft_deleted_files": 0,
                    "last_run": "",
                    "last_run_outcome": "",
                    "last_updated": "",
                    "needs_migration": False,
                    **Upstream().to_dict(),
                }
            )
            continue
        meta = (asyncio.run(store.get_collection_metadata(repo.name)) or {}) if store else {}
        record = store.catalog.repository(repo.name) if store else None
        physical = store.physical_name(repo.name) if store else None
        counts = store.catalog.file_counts(physical) if store and physical else {}
        failures = store.catalog.files(physical, FAILED) if store and physical else []
        skips = store.catalog.files(physical, SKIPPED) if store and physical else []
        level = declared_level(
            settings,
            repo.name,
            record.access_level if record else None,
            base=repo.version.base if repo.version else None,
        )
        shown = repository_status(
            store.catalog if store else None,
            repo.name,
            physical,
            level,
            repo=repo,
            meta=meta,
            fetch=fetch,
        )
        # What search warns about, status says: a complete index whose BM25 side is damaged,
        # missing or empty answers dense-only until the next ingest rebuilds it.
        bm25 = (store.bm25_problem(repo.name) if store and physical else None) or ""
        status = _index_status(meta, record)
        rows.append(
            {
                "repository": repo.name,
                "checked_out": shown.checked_out or "",
                "indexed_commit": shown.indexed_commit,
                "up_to_date": bool(shown.up_to_date),
                "status": "degraded" if bm25 and status == "complete" else status,
                # e.g. no commits, a bad submodule: this row says so
                "error": redact_text(shown.checkout_error),
                "bm25_problem": bm25,
                "collection": physical or "",
                "access_level": shown.access_level,
                "files": shown.files,
                "chunks": shown.chunks,
                "skipped": counts.get(SKIPPED, 0),
                # by rule: "draft", "expired", "not rendered", "snippet (not a page)", ...
                "skipped_reasons": dict(Counter(f.reason.split(":")[0].strip() for f in skips)),
                "failures": len(failures),
                "failed_files": [
                    {"path": f.path, "reason": redact_text(f.reason)} for f in failures
                ],
                "soft_deleted_files": counts.get(DELETED, 0),
                "last_run": shown.last_run_at,
                "last_run_outcome": shown.last_run_outcome,
                "last_updated": meta.get("last_updated", ""),
                "needs_migration": bool(store and physical) and needs_migration(store, repo.name),
                **shown.upstream.to_dict(),
                **shown.version_fields(),
            }
        )
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
    rows = reserve.reading(
        settings,
        lambda: status_rows(settings, repos, fetch=args.fetch),
        lambda warning: print(f"hetriever: warning: {terminal_safe(warning)}", file=sys.stderr),
    )
    route = resident.describe(args, settings)
    if args.json:
        print_json([{**row, "index": where, "search_route": route} for row in rows])
        return EXIT_OK
    from rich.table import Table

    from hetriever.commands.output import joined, plain

    table = Table(title=plain(f"status of {where}"))
    for col in (
        "repository",
        "checked out",
        "indexed",
        "upstream",
        "status",
        "files",
        "chunks",
        "failures",
        "last run",
    ):
        table.add_column(col)
    for r in rows:
        mark = ("✓", "green") if r["up_to_date"] else ("behind", "yellow")
        status = joined(r["status"], *([(" migrate", "red")] if r["needs_migration"] else []))
        if r["error"]:
            mark = ("error", "red")
            status.append(terminal_safe(f" {r['error'][:80]}"), style="red")
        elif r["bm25_problem"]:
            status = joined(
                (r["status"], "red"), ": BM25 index unusable, dense-only until an ingest"
            )
        table.add_row(
            plain(r["repository"]),
            r["checked_out"][:12],
            joined(f"{r['indexed_commit'][:12]} ", mark),
            upstream_cell(r),
            status,
            str(r["files"]),
            str(r["chunks"]),
            str(r["failures"]),
            plain(f"{r['last_run']} {r['last_run_outcome']}".strip()),
        )
    make_console().print(table)
    make_console().print(f"searches: {route_line(route)}", highlight=False)
    from hetriever.discover.upstream import upstream_advice

    for repo, r in zip(repos, rows):
        if r["upstream_error"] and r["indexed_commit"]:
            print(
                terminal_safe(f"hetriever: note: {r['repository']}: {r['upstream_error']}"),
                file=sys.stderr,
            )
        note = upstream_advice(settings.docs_root, repo, r, checked_out=r["up_to_date"])
        if note:
            print(terminal_safe(f"hetriever: note: {r['repository']}: {note}"), file=sys.stderr)
    if any(r["behind_upstream"] for r in rows):
        print(
            "hetriever: note: commits wait upstream: the next fetching run (the schedule, "
            "or a push webhook at once) indexes them",
            file=sys.stderr,
        )
    return EXIT_OK


def route_line(route: dict[str, Any]) -> str:
    """Which way `hetriever search` goes from here (hetriever.commands.resident)."""
    if route["route"] == "resident":
        return (
            f"answered by the resident search process (pid {route['pid']}; it stops "
            f"after {route['stops_after_idle_s']} s more without a search)"
        )
    return f"in-process ({route['why']})"


def upstream_cell(row: dict[str, Any]):
    """ "✓ origin/main", "behind by 3 (origin/main a1b2c3d4e5f6)", "?" or "" (no remote)."""
    from hetriever.commands.output import joined

    if not row["upstream_ref"]:
        return ""
    if row["behind_upstream"] is None:
        return joined((f"? {row['upstream_ref']}", "dim"))
    if row["ahead_of_upstream"]:  # the branch was moved back, or rewritten
        moved = "moved back" if row["behind_upstream"] == 0 else "diverged"
        return joined(
            (moved, "red"),
            f" ({row['upstream_ref']} {row['upstream_commit'][:12]}, "
            f"{row['ahead_of_upstream']} indexed commit(s) not on it)",
        )
    if row["behind_upstream"] == 0:
        return joined(("✓", "green"), f" {row['upstream_ref']}")
    return joined(
        (f"behind by {row['behind_upstream']}", "yellow"),
        f" ({row['upstream_ref']} {row['upstream_commit'][:12]})",
    )


def cmd_purge(args: argparse.Namespace) -> int:
    from hetriever.index.lifecycle import purge
    from hetriever.store.knowledge_store import get_knowledge_store

    settings = cli_settings(args)
    require_index(settings)
    report = asyncio.run(purge(get_knowledge_store(settings), args.older_than))
    if args.json:
        print_json({**report.to_dict(), "total_chunks": report.total_chunks})
    else:
        from hetriever.commands.output import plain

        make_console().print(
            plain(
                f"purged {report.total_chunks} soft-deleted chunks deleted "
                f"before {report.cutoff}: {report.chunks}; catalog files "
                f"removed: {report.files}"
            )
        )
    return EXIT_OK


def cmd_forget(args: argparse.Namespace) -> int:
    from hetriever.core.names import repository_name
    from hetriever.index.lifecycle import check_forget_file, forget
    from hetriever.store.knowledge_store import get_knowledge_store

    settings = cli_settings(args)
    check_forget_file(args.file)  # the argument's mistake first, index or none
    require_index(settings)
    name = repository_name(args.repository)  # `opentelemetry.io` for opentelemetry-io
    report = asyncio.run(forget(get_knowledge_store(settings), name, args.file))
    if args.json:
        print_json(report.to_dict())
    else:
        from hetriever.commands.output import plain

        what = f"{report.repository}:{report.file}" if report.file else report.repository
        if report.versions:
            what += f" and its versions {', '.join(report.versions)}"
        make_console().print(
            plain(
                f"forgot {what}: {report.chunks} chunks, {report.bm25_rows} BM25 rows from "
                f"{', '.join(report.collections) or 'no collection'}; catalog rows "
                f"{report.catalog_rows}"
            )
        )
    return EXIT_OK


def cmd_migrate(args: argparse.Namespace) -> int:
    from hetriever.discover.repositories import configured_repositories
    from hetriever.index.lifecycle import migrate_repository
    from hetriever.store.knowledge_store import get_knowledge_store

    settings = cli_settings(args)
    repos = configured_repositories(settings, args.repository)
    store = get_knowledge_store(settings)
    reports = [asyncio.run(migrate_repository(r, store, settings, force=args.force)) for r in repos]
    if args.json:
        print_json([r.to_dict() for r in reports])
    else:
        from hetriever.commands.output import plain

        for r in reports:
            make_console().print(
                plain(
                    f"{r.repository}: "
                    + (
                        f"{r.old_collection} -> {r.new_collection}, dropped {r.dropped_chunks} chunks"
                        if r.migrated
                        else r.reason
                    )
                )
            )
    return EXIT_OK


TEMPERATURE_NAMES = {
    "warm": "warm",
    "cold": "cold (start-up included)",
    "?": "temperature unrecorded",
}


def metrics_headline(summary: Any, last: int) -> list[str]:
    """Lines of plain text: the counts, then cold and warm apart (pooled, a second of start-up
    and a 12 ms search describe neither), then the modes."""
    if not summary.count:
        return ["no queries recorded yet"]
    lines = [
        f"queries: {summary.count} (the newest {last} at most)  results: "
        f"{summary.mean_results} on average, {summary.empty_rate:.1%} found nothing"
    ]
    for row in summary.by_temperature:
        lines.append(
            f"{TEMPERATURE_NAMES.get(row['temperature'], row['temperature'])}: "
            f"{row['count']} queries, p50 {row['p50_ms']} ms, p95 {row['p95_ms']} ms, "
            f"p99 {row['p99_ms']} ms"
        )
    modes = sorted(summary.by_mode.items(), key=lambda kv: (-kv[1], kv[0]))
    lines.append("by mode: " + ", ".join(f"{mode} {count}" for mode, count in modes))
    return lines


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

    from hetriever.commands.output import plain

    console = make_console()
    for line in metrics_headline(summary, args.last):
        console.print(line, markup=False, highlight=False)
    if summary.by_source:
        table = Table(
            title=plain(
                f"by source; cold: a process's first search, start-up "
                f"included ({settings.resolved_state_dir.absolute()})"
            )
        )
        for col in ("source", "temperature", "queries", "p50 ms", "p95 ms", "p99 ms"):
            table.add_column(col)
        for row in summary.by_source:
            table.add_row(
                plain(row["source"]),
                plain(row["temperature"]),
                str(row["count"]),
                str(row["p50_ms"]),
                str(row["p95_ms"]),
                str(row["p99_ms"]),
            )
        console.print(table)
    return EXIT_OK
