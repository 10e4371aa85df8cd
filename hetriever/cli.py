"""`hetriever` command line: ingest, search, status, metrics, purge, forget, migrate, serve, mcp, serve-webhook, demo, prepare-model.

User mistakes (bad settings, bad names, bad filters, unreachable backend) print one clear line
and exit 2, never a traceback. `--json` prints machine-readable output on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from hetriever.errors import HetrieverError, UserError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DEMO_DIR = Path(".demo")
DEMO_QUERY = "how do I filter a collection with where"


def _console(stderr: bool = False):
    """Readable results go to stdout (so `| head` works); progress bars to stderr."""
    from rich.console import Console

    console = Console(stderr=stderr)
    if not console.is_terminal:  # piped or captured: do not squeeze tables into 80 columns
        console = Console(stderr=stderr, width=140)
    return console


def _settings(args: argparse.Namespace, **extra: Any):
    from hetriever.config import load_settings
    from hetriever.logs import configure_logging

    overrides = {k: v for k, v in extra.items() if v is not None}
    if getattr(args, "docs_root", None):
        overrides["docs_root"] = args.docs_root
    if getattr(args, "chroma_path", None):
        overrides["chroma_path"] = args.chroma_path
    settings = load_settings(**overrides)
    configure_logging(settings.log_level if not getattr(args, "quiet", False) else "WARNING",
                      settings.log_format)
    return settings


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


# --- ingest --------------------------------------------------------------------------


async def _ingest_local(settings, names: list[str] | None, force_full: bool,
                        show_progress: bool) -> list[dict]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from hetriever.discover import discover_repositories, select_repositories
    from hetriever.indexing import index_repository
    from hetriever.logs import get_logger
    from hetriever.store import get_knowledge_store

    log = get_logger("hetriever.cli")
    repos = select_repositories(
        discover_repositories(settings.docs_root, content_dir=settings.content_dir,
                              urls=settings.repository_urls), names)
    outcomes = []
    store = get_knowledge_store(settings)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=_console(stderr=True), disable=not show_progress,
                  transient=True) as progress:
        for repo in repos:
            task = progress.add_task(f"indexing {repo.name}", total=None)

            def tick(done: int, total: int, task=task) -> None:
                progress.update(task, completed=done, total=total)

            try:
                result = await index_repository(repo, store, settings, force_full=force_full,
                                                progress=tick)
                outcome = {"repository": repo.name, "ok": result.completed, **result.to_dict()}
                if not result.completed:
                    outcome["error"] = (f"{len(result.failed)} file(s) could not be stored; "
                                        "the commit was not recorded (see the log), re-run")
                outcomes.append(outcome)
            except OSError:  # the data directories, the disk: every repository's problem
                raise
            except Exception as exc:  # one failing repository does not stop the others
                storage = store.storage_problem(exc)
                if storage is not None:  # a full or read-only disk stops every repository
                    raise storage from exc
                if isinstance(exc, HetrieverError):
                    error = str(exc)
                    log.error("repository_failed", repository=repo.name, error=error)
                else:  # not a known condition: keep the traceback in the log
                    error = f"{type(exc).__name__}: {exc}"
                    log.exception("repository_failed", repository=repo.name, error=error)
                outcomes.append({"repository": repo.name, "ok": False, "error": error})
    return outcomes


def _print_ingest(outcomes: list[dict]) -> None:
    from rich.table import Table

    table = Table(title="ingest")
    for col in ("repository", "mode", "commit", "indexed", "skipped", "deleted",
                "chunks +", "reused", "chunks -", "seconds"):
        table.add_column(col)
    for o in outcomes:
        if not o["ok"]:
            table.add_row(o["repository"], "[red]failed[/red]", "", "", "", "", "", "", "",
                          o["error"][:60])
            continue
        table.add_row(o["repository"], o["mode"], o["new_commit"][:12], str(o["files_indexed"]),
                      str(len(o["skipped"])), str(o["files_deleted"]), str(o["chunks_written"]),
                      str(o["chunks_reused"]), str(o["chunks_deleted"]),
                      f"{o['total_seconds']:.1f}")
    _console().print(table)


def cmd_ingest(args: argparse.Namespace) -> int:
    if args.allow_mass_delete and not args.full:
        raise UserError("--allow-mass-delete needs --full",
                             hint="a run that deletes most of an index must be a full pass")
    settings = _settings(args, batch_size=args.batch_size,
                         allow_mass_delete=True if args.allow_mass_delete else None)
    if args.task_runner and args.engine != "prefect":
        raise UserError("--task-runner needs --engine prefect",
                        hint="the task runner is the Prefect flow's; the local engine runs "
                             "in this process")
    if args.engine == "prefect":
        import os

        # Without PREFECT_API_URL, Prefect starts a temporary local server: give it time on a
        # busy machine, and keep it from reaching out for analytics (there may be no network).
        os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
        os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
        # The flow reads its settings from the environment: hand it this command's options.
        os.environ["HETRIEVER_DOCS_ROOT"] = str(settings.docs_root)
        os.environ["HETRIEVER_CHROMA_PATH"] = str(settings.chroma_path)
        from flows.ingest import ingest

        try:
            # A flow called with return_state=True returns a coroutine of its State.
            run = ingest(repositories=args.repository or None, force_full=args.full,
                         batch_size=args.batch_size, task_runner=args.task_runner,
                         return_state=True)
            state: Any = asyncio.run(run)  # type: ignore[arg-type]
        except RuntimeError as exc:  # e.g. the Prefect API cannot be reached or started
            raise HetrieverError(f"Prefect is not available: {exc}",
                                 hint="set PREFECT_API_URL to a running server, or use "
                                      "--engine local") from None
        summary = state.result(raise_on_failure=False)
        if not isinstance(summary, dict):  # the flow failed before any repository ran
            raise summary if isinstance(summary, HetrieverError) else HetrieverError(
                f"the ingest flow failed: {state.message or summary}")
        outcomes = summary["repositories"]
    else:
        outcomes = asyncio.run(_ingest_local(settings, args.repository or None, args.full,
                                             show_progress=not args.json))
    if args.json:
        _print_json(outcomes)
    else:
        _print_ingest(outcomes)
    return EXIT_OK if all(o["ok"] for o in outcomes) else EXIT_FAILED


# --- search --------------------------------------------------------------------------


def _run_search(settings, query: str, repositories: list[str] | None, top_k: int | None,
                filters: dict | None, hybrid: bool | None, access: list[str] | None = None,
                group_by: str | None = None, lang: str | None = None):
    from hetriever.metrics import QueryMetric, metrics_store
    from hetriever.search import retrieve
    from hetriever.store import get_knowledge_store

    async def go():
        from hetriever.discover import require_known
        from hetriever.store import validate_collection_name

        store = get_knowledge_store(settings)
        for name in repositories or []:
            validate_collection_name(name)  # a malformed name says so, before "unknown"
        require_known(repositories, store.repository_names())
        return await retrieve(store, query, top_k=top_k, filters=filters,
                              namespaces=repositories, hybrid=hybrid, access_levels=access,
                              group_by=group_by, lang=lang)

    result = asyncio.run(go())
    metrics = metrics_store(settings.resolved_state_dir)
    metrics.record(QueryMetric.from_result(result, repositories))
    metrics.close()
    return result


def _print_results(result) -> None:
    console = _console()
    console.print(f"[bold]{result.total_results} results[/bold] for {result.query!r} "
                  f"({result.mode}, {result.search_time_ms:.1f} ms)")
    for i, match in enumerate(result.matches, start=1):
        meta = match.metadata
        heading = f" > {meta['heading_context']}" if meta.get("heading_context") else ""
        console.print(f"\n[bold cyan]{i}. {meta.get('title', '')}{heading}[/bold cyan]"
                      f"  [dim]{meta.get('repository', '')}{meta.get('url', '')}[/dim]")
        console.print(f"   score {match.score:.3f} ({match.source})")
        # The passage without its "title > heading" prefix (a page record: without its title).
        cut = "\n" if meta.get("page_record") else "\n\n"
        body = match.content.split(cut, 1)[-1].replace("\n", " ")
        console.print(f"   {body[:220]}{'…' if len(body) > 220 else ''}", highlight=False)
        also = [p["heading_context"] for p in match.passages if p.get("heading_context")]
        if also:
            console.print(f"   [dim]also: {'; '.join(also)}[/dim]", highlight=False)
        if match.translations:
            other = ", ".join(f"{t['lang']} {t['url']}" for t in match.translations)
            console.print(f"   [dim]in other languages: {other}[/dim]", highlight=False)


def _parse_filter(raw: str | None) -> dict | None:
    if not raw:
        return None
    from hetriever.errors import InvalidFilterError

    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidFilterError(f"--filter is not valid JSON: {exc.msg}",
                                 hint='e.g. --filter \'{"section": "functions"}\'') from None
    except RecursionError:
        value = _TOO_DEEP  # deeper than the JSON parser goes: refused below
    if value is _TOO_DEEP or _depth(value) > MAX_FILTER_DEPTH:
        raise InvalidFilterError(f"--filter is nested more than {MAX_FILTER_DEPTH} levels deep",
                                 hint="a filter needs a few levels of $and/$or at most")
    return value


MAX_FILTER_DEPTH = 32
_TOO_DEEP = object()


def _depth(value: Any) -> int:
    """Nesting depth of a JSON value, without recursion (a value may be deeply nested)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > MAX_FILTER_DEPTH:
            break
        children = item.values() if isinstance(item, dict) else item \
            if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _bm25_warnings(settings, repositories: list[str] | None) -> list[str]:
    """Why a hybrid search ran without some repositories' BM25 side."""
    from hetriever.store import get_knowledge_store

    store = get_knowledge_store(settings)
    problems = (store.bm25_problem(name) for name in repositories or store.repository_names())
    return [p for p in problems if p]


def _absent(path: Path) -> bool:
    """Not there, under a directory that is (a path under a file is another error, told by
    the store: it names the file in the way)."""
    if path.exists():
        return False
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    return parent.is_dir()


def _blocked(directory: Path) -> bool:
    """A file where the directory, or one of its parents, should be."""
    node = directory
    while not node.exists() and node != node.parent:
        node = node.parent
    return not node.is_dir()


def _require_index(settings) -> None:
    """Searching a path or state directory that no ingest wrote is a mistake, not 0 results
    (only `ingest` creates them)."""
    from hetriever.catalog import CATALOG_FILE
    from hetriever.errors import ConfigurationError

    if settings.follow:
        return  # a follower's catalog is made by following the server's manifest

    dirs = [settings.resolved_state_dir] + ([] if settings.server_mode else [settings.chroma_path])
    if any(_blocked(d) for d in dirs):
        return  # a file in the way: the store names it, with what to do
    if not settings.server_mode and _absent(settings.chroma_path):
        raise ConfigurationError(f"no index at {settings.chroma_path}: the Chroma directory "
                                 "does not exist",
                                 hint="check HETRIEVER_CHROMA_PATH / --chroma-path, or run "
                                      "`hetriever ingest` first")
    catalog = settings.resolved_state_dir / CATALOG_FILE
    if _absent(catalog):
        raise ConfigurationError(f"no catalog at {catalog}: the state directory holds no index",
                                 hint="set HETRIEVER_STATE_DIR to the one `hetriever ingest` "
                                      "used (server mode defaults to ./.hetriever), or ingest "
                                      "first")


def cmd_search(args: argparse.Namespace) -> int:
    from hetriever.filters import validate_filter
    from hetriever.search import resolve_top_k
    from hetriever.store import validate_collection_name

    settings = _settings(args)
    for name in args.repository or []:  # the arguments first, then whether there is an index
        validate_collection_name(name)
    filters = _parse_filter(args.filter)
    validate_filter(filters)
    resolve_top_k(args.top_k, settings.default_top_k, settings.max_top_k)
    _require_index(settings)
    hybrid = None if args.mode is None else args.mode == "hybrid"
    access = [level for raw in (args.access or []) for level in raw.split(",") if level.strip()]
    result = _run_search(settings, args.query, args.repository or None, args.top_k,
                         filters, hybrid, access or None, args.group, args.lang)
    warnings = _bm25_warnings(settings, args.repository) \
        if (settings.use_hybrid_search if hybrid is None else hybrid) else []
    for warning in warnings:
        print(f"hetriever: warning: {warning}; results are dense-only until `hetriever "
              "ingest` rebuilds it from Chroma", file=sys.stderr)
    if args.json:
        _print_json({**result.to_dict(), "warnings": warnings})
    else:
        _print_results(result)
    return EXIT_OK


def cmd_follow(args: argparse.Namespace) -> int:
    from hetriever.replica import follow_sync
    from hetriever.store import get_knowledge_store

    settings = _settings(args)
    if not settings.follow:
        settings = settings.replace(follow=True)  # validated: needs a Chroma server
    report = follow_sync(get_knowledge_store(settings), force=True)
    if args.json:
        _print_json(report.to_dict())
    else:
        print(f"followed {len(report.repositories)} repositories ({report.added} BM25 rows "
              f"written, {report.removed} deleted; {len(report.dropped)} dropped) in "
              f"{report.seconds:.1f} s")
    return EXIT_OK


# --- status and metrics --------------------------------------------------------------


def status_rows(settings, repos) -> list[dict[str, Any]]:
    """Per repository: checked-out and indexed commit, files, chunks, failures, last run.

    The catalog is the source of truth; the collection metadata fills in for a repository the
    catalog has not seen (an index made before it existed).
    """
    from hetriever.catalog import DELETED, FAILED, INDEXED, SKIPPED
    from hetriever.discover import head_commit
    from hetriever.errors import SourceError
    from hetriever.lifecycle import needs_migration
    from hetriever.store import get_knowledge_store

    store = get_knowledge_store(settings)
    catalog = store.catalog
    rows = []
    for repo in repos:
        meta = asyncio.run(store.get_collection_metadata(repo.name)) or {}
        record = catalog.repository(repo.name)
        physical = store.physical_name(repo.name)
        counts = catalog.file_counts(physical) if physical else {}
        failures = catalog.files(physical, FAILED) if physical else []
        try:
            head, error = head_commit(repo), ""
        except SourceError as exc:  # e.g. no commits, a bad submodule: this row says so
            head, error = "", str(exc)
        indexed = (record.last_commit if record and record.last_commit
                   else meta.get("commit_hash", ""))
        rows.append({
            "repository": repo.name,
            "checked_out": head,
            "indexed_commit": indexed,
            "up_to_date": bool(indexed) and indexed == head,
            "status": meta.get("index_status", "never indexed"),
            "error": error,
            "collection": physical or "",
            "access_level": record.access_level if record else
            settings.access_levels.get(repo.name, "PUBLIC"),
            "files": counts.get(INDEXED, meta.get("total_documents", 0)),
            "chunks": meta.get("total_chunks", 0),
            "skipped": counts.get(SKIPPED, 0),
            "failures": len(failures),
            "failed_files": [{"path": f.path, "reason": f.reason} for f in failures],
            "soft_deleted_files": counts.get(DELETED, 0),
            "last_run": record.last_run_at if record else "",
            "last_run_outcome": record.last_run_outcome if record else "",
            "last_updated": meta.get("last_updated", ""),
            "needs_migration": bool(physical) and needs_migration(store, repo.name),
        })
    return rows


def cmd_status(args: argparse.Namespace) -> int:
    from hetriever.discover import discover_repositories

    settings = _settings(args)
    repos = discover_repositories(settings.docs_root, content_dir=settings.content_dir,
                                  urls=settings.repository_urls)
    rows = status_rows(settings, repos)
    if args.json:
        _print_json(rows)
        return EXIT_OK
    from rich.table import Table

    table = Table(title="status")
    for col in ("repository", "checked out", "indexed", "status", "files", "chunks",
                "failures", "last run"):
        table.add_column(col)
    for r in rows:
        mark = "[green]✓[/green]" if r["up_to_date"] else "[yellow]behind[/yellow]"
        status = r["status"] + (" [red]migrate[/red]" if r["needs_migration"] else "")
        if r["error"]:
            mark, status = "[red]error[/red]", f"{status} [red]{r['error'][:80]}[/red]"
        table.add_row(r["repository"], r["checked_out"][:12],
                      f"{r['indexed_commit'][:12]} {mark}", status, str(r["files"]),
                      str(r["chunks"]), str(r["failures"]),
                      f"{r['last_run']} {r['last_run_outcome']}".strip())
    _console().print(table)
    return EXIT_OK


# --- lifecycle: purge, forget, migrate ---------------------------------------------------


def cmd_purge(args: argparse.Namespace) -> int:
    from hetriever.lifecycle import purge
    from hetriever.store import get_knowledge_store

    settings = _settings(args)
    report = asyncio.run(purge(get_knowledge_store(settings), args.older_than))
    if args.json:
        _print_json({**report.to_dict(), "total_chunks": report.total_chunks})
    else:
        _console().print(f"purged {report.total_chunks} soft-deleted chunks deleted before "
                         f"{report.cutoff}: {report.chunks}; catalog files removed: "
                         f"{report.files}")
    return EXIT_OK


def cmd_forget(args: argparse.Namespace) -> int:
    from hetriever.lifecycle import forget
    from hetriever.store import get_knowledge_store

    settings = _settings(args)
    report = asyncio.run(forget(get_knowledge_store(settings), args.repository, args.file))
    if args.json:
        _print_json(report.to_dict())
    else:
        what = f"{report.repository}:{report.file}" if report.file else report.repository
        _console().print(f"forgot {what}: {report.chunks} chunks, {report.bm25_rows} BM25 rows "
                         f"from {', '.join(report.collections) or 'no collection'}; catalog "
                         f"rows {report.catalog_rows}")
    return EXIT_OK


def cmd_migrate(args: argparse.Namespace) -> int:
    from hetriever.discover import discover_repositories
    from hetriever.lifecycle import migrate_repository
    from hetriever.store import get_knowledge_store

    settings = _settings(args)
    repos = discover_repositories(settings.docs_root, content_dir=settings.content_dir,
                                  urls=settings.repository_urls)
    if args.repository:
        unknown = sorted(set(args.repository) - {r.name for r in repos})
        if unknown:
            from hetriever.errors import RepositoryNotFoundError

            raise RepositoryNotFoundError(f"unknown repositories: {', '.join(unknown)}",
                                          hint=f"known: {', '.join(r.name for r in repos)}")
        repos = [r for r in repos if r.name in args.repository]
    store = get_knowledge_store(settings)
    reports = [asyncio.run(migrate_repository(r, store, settings, force=args.force))
               for r in repos]
    if args.json:
        _print_json([r.to_dict() for r in reports])
    else:
        for r in reports:
            _console().print(f"{r.repository}: " + (
                f"{r.old_collection} -> {r.new_collection}, dropped {r.dropped_chunks} chunks"
                if r.migrated else r.reason))
    return EXIT_OK


def cmd_metrics(args: argparse.Namespace) -> int:
    from hetriever.metrics import metrics_store

    settings = _settings(args)
    store = metrics_store(settings.resolved_state_dir)
    summary = store.summary(last=args.last, source=args.source)
    store.close()
    if args.json:
        _print_json(summary.to_dict())
    else:
        _console().print(f"queries: {summary.count}  p50: {summary.p50_ms} ms  "
                         f"p95: {summary.p95_ms} ms  p99: {summary.p99_ms} ms  "
                         f"mean results: {summary.mean_results}  empty: {summary.empty_rate}  "
                         f"by mode: {summary.by_mode}")
    return EXIT_OK


# --- demo ----------------------------------------------------------------------------


def _sample_docs_source() -> Path:
    here = Path(__file__).resolve().parent.parent / "examples" / "sample-docs"
    if not here.is_dir():
        raise HetrieverError("the bundled sample docs are missing",
                             hint="run the demo from a checkout of the hetriever repository")
    return here


def _git(cwd: Path, *argv: str) -> None:
    env = {"GIT_AUTHOR_NAME": "hetriever", "GIT_AUTHOR_EMAIL": "demo@example.invalid",
           "GIT_COMMITTER_NAME": "hetriever", "GIT_COMMITTER_EMAIL": "demo@example.invalid"}
    import os

    subprocess.run(["git", *argv], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, **env})


def _demo_docs(root: Path) -> Path:
    repo = root / "docs" / "sample-docs"
    source = _sample_docs_source()
    if repo.exists():
        shutil.rmtree(repo)
    shutil.copytree(source, repo)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "sample docs")
    return root / "docs"


def cmd_demo(args: argparse.Namespace) -> int:
    docs_root = _demo_docs(DEMO_DIR)
    args.docs_root = str(docs_root)
    args.chroma_path = str(DEMO_DIR / "chroma_data")
    settings = _settings(args, state_dir=str(DEMO_DIR / ".hetriever"))
    console = _console()
    console.print(f"[bold]1. ingest[/bold] {docs_root}/sample-docs -> {settings.chroma_path}")
    outcomes = asyncio.run(_ingest_local(settings, None, False, show_progress=True))
    _print_ingest(outcomes)
    if not all(o["ok"] for o in outcomes):
        return EXIT_FAILED
    query = args.query or DEMO_QUERY
    console.print(f"\n[bold]2. search[/bold] {query!r}")
    result = _run_search(settings, query, None, 3, None, None)
    _print_results(result)
    return EXIT_OK if result.matches else EXIT_FAILED


# --- wiring --------------------------------------------------------------------------


def cmd_prepare_model(args: argparse.Namespace) -> int:
    from hetriever.embed import prepare_model_main

    return prepare_model_main(args.rest)


def cmd_serve(args: argparse.Namespace) -> int:
    if args.new_key:
        from hetriever.serve.keys import new_key

        key, line = new_key(args.new_key)
        print(key)
        print(f"add to the key file (HETRIEVER_API_KEYS_FILE): {line}", file=sys.stderr)
        return EXIT_OK
    from hetriever.serve.run import serve
    from hetriever.serve.service import Limits

    if args.max_concurrency < 1:
        raise UserError("--max-concurrency must be at least 1")
    return serve(_settings(args), host=args.host, port=args.port,
                 limits=Limits(max_concurrency=args.max_concurrency))


def cmd_mcp(args: argparse.Namespace) -> int:
    from hetriever.serve.run import mcp

    return mcp(_settings(args), transport=args.transport, host=args.host, port=args.port)


def cmd_serve_webhook(args: argparse.Namespace) -> int:
    from hetriever.webhook import main as webhook_main

    return webhook_main(args.rest)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hetriever", description=__doc__.splitlines()[0])
    parser.add_argument("--docs-root", help="parent repo with submodules, or a folder of git repos")
    parser.add_argument("--chroma-path", help="embedded Chroma directory")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("ingest", help="index changed documentation repositories")
    p.add_argument("-r", "--repository", action="append", help="only this repository (repeatable)")
    p.add_argument("--full", action="store_true", help="force a full re-index")
    p.add_argument("--allow-mass-delete", action="store_true",
                   help="with --full: let the run delete more than half of a repository's chunks")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--engine", choices=["local", "prefect"], default="local",
                   help="run in-process (default) or as the Prefect ingest flow")
    p.add_argument("--task-runner",
                   help='with --engine prefect: "threads", "threads:N", "dask" (a local '
                        'cluster) or "dask:tcp://host:8786" (file tasks and embedding run on '
                        "its workers)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("search", help="hybrid search over indexed repositories")
    p.add_argument("query")
    p.add_argument("-r", "--repository", action="append", help="search only these (repeatable)")
    p.add_argument("-k", "--top-k", type=int)
    p.add_argument("--filter", help='metadata filter as JSON, e.g. \'{"section": "functions"}\'')
    p.add_argument("--mode", choices=["hybrid", "dense"], help="override USE_HYBRID_SEARCH")
    p.add_argument("--group", choices=["page", "chunk"],
                   help="one result per page (default) or per chunk")
    p.add_argument("--lang", help="results in this language (e.g. ja), or 'all'; default: "
                                  "each multilingual site's default language")
    p.add_argument("--access", action="append",
                   help="access levels the caller may see, e.g. PUBLIC,TEAM (repeatable; "
                        "default PUBLIC only)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("follow", help="copy the catalog and BM25 index of a Chroma server that "
                                      "another machine ingests into (searches do it too)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_follow)

    p = sub.add_parser("status", help="indexed commit, files, chunks, failures, last run")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("purge", help="remove soft-deleted chunks older than the retention")
    p.add_argument("--older-than", type=float, help="days (default: retention_days)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_purge)

    p = sub.add_parser("forget", help="erase a repository or one file at once")
    p.add_argument("-r", "--repository", required=True)
    p.add_argument("--file", help="repository-relative path of one file")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_forget)

    p = sub.add_parser("migrate", help="rebuild indexes whose chunking or model changed, "
                                       "switching searches over when complete")
    p.add_argument("-r", "--repository", action="append", help="only this repository")
    p.add_argument("--force", action="store_true", help="rebuild even when up to date")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("metrics", help="latency percentiles over recent queries")
    p.add_argument("--last", type=int, default=1000)
    p.add_argument("--source", choices=["http", "mcp"],
                   help="only searches served by `hetriever serve` or `hetriever mcp`")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_metrics)

    p = sub.add_parser("serve", help="the search API over HTTP (OpenAPI docs at /docs)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--new-key", metavar="LEVELS",
                   help="print a new API key granting LEVELS (e.g. TEAM) and its key-file line")
    p.add_argument("--max-concurrency", type=int, default=8,
                   help="searches run at once; more requests wait, past 64 waiting: 503")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("mcp", help="the docs as MCP tools for coding assistants")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1", help="with --transport http")
    p.add_argument("--port", type=int, default=8081, help="with --transport http")
    p.set_defaults(func=cmd_mcp)

    p = sub.add_parser("demo", help="index the bundled sample docs and run one search")
    p.add_argument("query", nargs="?")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("prepare-model", help="write the offline embedding model")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_prepare_model)

    p = sub.add_parser("serve-webhook", help="run the push-webhook service")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_serve_webhook)
    return parser


PASS_THROUGH = {"prepare-model": "cmd_prepare_model", "serve-webhook": "cmd_serve_webhook"}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in PASS_THROUGH:
        # these subcommands own their options: hand them over untouched
        args = argparse.Namespace(rest=argv[1:], func=globals()[PASS_THROUGH[argv[0]]])
    else:
        args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except HetrieverError as exc:
        print(f"hetriever: error: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, UserError) else EXIT_FAILED
    except OSError as exc:  # e.g. a data directory that is a file or cannot be written
        import errno

        where = f" {exc.filename}" if exc.filename else ""
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            print(f"hetriever: error: no space left on the device of{where or ' a data directory'}"
                  " (free some space, then re-run)", file=sys.stderr)
            return EXIT_FAILED
        print(f"hetriever: error: cannot use{where}: {exc.strerror or exc} (check that "
              "HETRIEVER_CHROMA_PATH and HETRIEVER_STATE_DIR are writable directories)",
              file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("hetriever: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
