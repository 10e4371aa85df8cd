"""`hetriever search` and `hetriever follow`."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from hetriever.commands.common import (
    EXIT_OK,
    cli_settings,
    index_location,
    make_console,
    note_location,
    print_json,
    print_note,
    require_index,
)
from hetriever.core.errors import UserError
from hetriever.core.models import RetrievalResult, SearchResult

if TYPE_CHECKING:
    from hetriever.search.request import SearchRequest


def run_search(settings, request: SearchRequest, *, cold: bool = True):
    """`request` answered in this process, its metrics and analytics recorded."""
    import asyncio
    import sqlite3

    from hetriever.search.hybrid import retrieve
    from hetriever.search.metrics import QueryMetric, metrics_store
    from hetriever.store.knowledge_store import get_knowledge_store

    async def go():
        from hetriever.core.names import require_known, validate_collection_name

        store = get_knowledge_store(settings)
        for name in repositories or []:
            validate_collection_name(name)  # a malformed name says so, before "unknown"
        require_known(repositories, store.repository_names())
        return await retrieve(store, request)

    repositories = list(request.repositories) if request.repositories else None

    result = asyncio.run(go())
    try:  # a query's metrics are worth less than its answer (a full disk, a locked file)
        metrics = metrics_store(settings.resolved_state_dir)
        try:
            # A CLI search in its own process is that process's first: the model, store and
            # BM25 index load on its way (`cold`); the resident process's are warm.
            metrics.record(QueryMetric.from_result(result, repositories, source="cli", cold=cold))
        finally:
            metrics.close()
    except (sqlite3.Error, OSError) as exc:
        from hetriever.core.logs import get_logger

        get_logger(__name__).warning("query_metrics_not_recorded", error=str(exc))
    if settings.analytics:  # cold: a search in its own process is that process's first
        from hetriever.search.analytics import QueryRecord, record_quietly

        record_quietly(
            settings, QueryRecord.of(result, repositories=repositories, source="cli", cold=cold)
        )
    return result


def result_links(result, settings=None) -> list[str]:
    """Each match's full link (`https://docs.example.org/docs/quokka/`) where the index
    `settings` name recorded where its site is published, else its site-relative URL (the
    resident process's answer carries the links it found)."""
    if isinstance(result, ServedResult):
        return result.links
    if settings is None:
        return [str(m.metadata.get("url", "")) for m in result.matches]
    from hetriever.search.published import links_of
    from hetriever.store.knowledge_store import get_knowledge_store

    return links_of(
        get_knowledge_store(settings).catalog,
        result.matches,
        settings.site_urls,
        settings.content_dir,
    )


def print_results(result, settings=None, index: str = "") -> None:
    """Each match with its full link (`result_links`) or its repository and URL, as written
    (`hetriever.commands.output`)."""
    from hetriever.commands.output import print_search_results

    print_search_results(result, result_links(result, settings), make_console(), index)


def _parse_filter(raw: str | None) -> dict | None:
    if not raw:
        return None
    from hetriever.core.errors import InvalidFilterError

    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidFilterError(
            f"--filter is not valid JSON: {exc.msg}",
            hint='e.g. --filter \'{"section": "functions"}\'',
        ) from None
    except RecursionError:
        value = _TOO_DEEP  # deeper than the JSON parser goes: refused below
    if value is _TOO_DEEP or _depth(value) > MAX_FILTER_DEPTH:
        raise InvalidFilterError(
            f"--filter is nested more than {MAX_FILTER_DEPTH} levels deep",
            hint="a filter needs a few levels of $and/$or at most",
        )
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
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        )
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _warnings(settings, repositories: list[str] | None, hybrid: bool) -> list[str]:
    """What the results lack: repositories whose first ingest has not completed (`serve`
    leaves those out; here they are searched, and said to be partial), and why a hybrid search
    ran without some repositories' BM25 side."""
    from hetriever.store.knowledge_store import get_knowledge_store

    store = get_knowledge_store(settings)
    names = repositories or store.repository_names()
    out = [
        f"{name}: its first ingest has not completed, so its results are partial (run "
        "`hetriever ingest`)"
        for name in names
        if not store.catalog.complete(name)
    ]
    if hybrid:
        out += [
            f"{problem}; results are dense-only until `hetriever ingest` rebuilds it from Chroma"
            for problem in map(store.bm25_problem, names)
            if problem
        ]
    return out


def search_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """A search's arguments as the command line gave them (what the resident process is sent;
    `search_here` parses them into a SearchRequest)."""
    return {name: getattr(args, name) for name in SEARCH_ARGUMENTS}


SEARCH_ARGUMENTS = (
    "query",
    "repository",
    "top_k",
    "filter",
    "mode",
    "group",
    "lang",
    "access",
    "version",
)


def search_here(
    settings, arguments: dict[str, Any], *, cold: bool = True, note: bool = True
) -> tuple[Any, list[str]]:
    """The search `arguments` (`search_arguments`) ask, in this process: their checks, then
    the result and its warnings. `cold`: this process's first search; `note`: say on stderr where an old
    default index is."""
    from hetriever.commands import reserve
    from hetriever.core.names import as_given, validate_collection_name
    from hetriever.search.planning import resolve_top_k
    from hetriever.search.request import SearchRequest
    from hetriever.store.filters import validate_filter

    args = argparse.Namespace(**arguments)
    if not args.query.strip():
        raise UserError("the query is empty", hint="give some words to search for")
    if args.top_k is not None and args.top_k < 1:
        raise UserError(f"-k must be at least 1, got {args.top_k}")
    try:  # bytes that are not UTF-8 reach Python as lone surrogates, which nothing can encode
        args.query.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(
            "the query is not valid UTF-8 text",
            hint="check the encoding of the shell or script that passes it",
        ) from None
    args.repository = as_given(args.repository)  # `opentelemetry.io` for opentelemetry-io
    for name in args.repository or []:  # the arguments first, then whether there is an index
        validate_collection_name(name)
    filters = _parse_filter(args.filter)
    validate_filter(filters)
    resolve_top_k(args.top_k, settings.default_top_k, settings.max_top_k)
    require_index(settings)
    if note:
        note_location(settings)
    hybrid = None if args.mode is None else args.mode == "hybrid"
    access = [level for raw in (args.access or []) for level in raw.split(",") if level.strip()]
    warnings: list[str] = []
    request = SearchRequest(
        args.query,
        args.top_k,
        filters,
        repositories=args.repository or None,
        hybrid=hybrid,
        access_levels=access or None,
        group_by=args.group,
        lang=args.lang,
        version=getattr(args, "version", None),
    )
    result = reserve.reading(
        settings, lambda: run_search(settings, request, cold=cold), warnings.append
    )
    warnings += _warnings(
        settings, args.repository, settings.use_hybrid_search if hybrid is None else hybrid
    )
    return result, warnings


class ServedResult(RetrievalResult):
    """A result the resident process answered, with the links it found for its matches."""

    links: list[str]


def _served(answer: dict[str, Any]) -> tuple[ServedResult, list[str]]:
    fields = dict(answer["result"])
    matches = [SearchResult(**match) for match in fields.pop("matches")]
    result = ServedResult(matches=matches, **fields)
    result.links = list(answer["links"])
    return result, list(answer["warnings"])


def cmd_search(args: argparse.Namespace) -> int:
    from hetriever.commands import resident

    served = resident.ask(args, search_arguments(args))
    if served is None:
        from hetriever.embed.embedder import embedding_one_query

        with embedding_one_query():
            settings = cli_settings(args)
            result, warnings = search_here(settings, search_arguments(args))
        where = index_location(settings)
    else:  # answered by the resident process: the settings, store and model stay unloaded
        settings = None
        result, warnings = _served(served)
        where = served["index"]
        print_note(served["note"])
    from hetriever.core.terminal import terminal_safe

    for warning in warnings:
        print(f"hetriever: warning: {terminal_safe(warning)}", file=sys.stderr)
    if args.json:
        answer = result.to_dict()
        for match, link in zip(answer["matches"], result_links(result, settings)):
            match["link"] = link  # as the HTTP API's: the page's full address where known
        print_json({**answer, "warnings": warnings})
    else:
        print_results(result, settings, where)
    if served is None:
        resident.start(args, settings)  # after the output: the next search is answered warm
    return EXIT_OK


def cmd_follow(args: argparse.Namespace) -> int:
    from hetriever.store.knowledge_store import get_knowledge_store

    settings = cli_settings(args)
    if not settings.follow:
        settings = settings.replace(follow=True)  # validated: needs a Chroma server
    report = get_knowledge_store(settings).replica.follow(force=True)
    if args.json:
        print_json(report.to_dict())
    else:
        print(
            f"followed {len(report.repositories)} repositories ({report.added} BM25 rows "
            f"written, {report.removed} deleted; {len(report.dropped)} dropped) in "
            f"{report.seconds:.1f} s"
        )
    return EXIT_OK
