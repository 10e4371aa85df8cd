"""What the HTTP API and the MCP server both answer: search, a page, the repositories.

Plain Python over one long-lived `Store`, so the model, the Chroma client and
the BM25 indexes stay warm between requests. The store reopens embedded Chroma when another
process (an ingest) wrote since it last looked, and searches follow the catalog's alias to the
last complete generation, so a reindex is served without a restart and a half-built one never
is: a repository whose first ingest has started but never completed (running, crashed or
failed) is not served at all until one completes. Every answer is filtered by the caller's
access levels; a repository the caller may not see
is treated exactly like one that does not exist.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from hetriever.core.access import caller_levels, denial
from hetriever.core.config import ACCESS_LEVELS, Settings
from hetriever.core.errors import HetrieverError, InvalidFilterError, InvalidLimitError
from hetriever.core.logs import get_logger
from hetriever.core.names import is_valid_repository_name, repository_name
from hetriever.core.redact import hide_paths, server_places
from hetriever.core.versions import ALL, version_from_settings
from hetriever.search import published
from hetriever.search.hybrid import hybrid_search
from hetriever.search.planning import plan_collections
from hetriever.search.request import SearchRequest
from hetriever.search.version_scope import version_scope, versions_of, wanted_version
from hetriever.serve import pages
from hetriever.store.catalog_records import address_host
from hetriever.store.knowledge_store import Store

log = get_logger(__name__)

GROUPS = ("page", "chunk")
# A title-like query (the exact-match path) and a question (the links prior).
WARM_UP_QUERIES = (
    "getting started guide",
    "how do I configure the settings of my site for a new release",
)
# A page read that meets a file mid-rewrite waits this long, growing, between tries
# (a write window's BM25 commit follows its Chroma delete within milliseconds).
PAGE_READ_ATTEMPTS = 5
PAGE_READ_PAUSE = 0.02


class RequestError(HetrieverError):
    """The caller asked for something malformed or over a limit (HTTP 400)."""


class TooLarge(RequestError):
    """A request body over the limit (HTTP 413)."""


class NotFound(HetrieverError):
    """No such page for this caller (HTTP 404; a hidden page is not distinguished)."""


class Busy(HetrieverError):
    """Too many requests waiting (HTTP 503)."""


@dataclass(frozen=True)
class Limits:
    max_query_chars: int = 1000
    max_k: int = 50
    max_body_bytes: int = 16 * 1024
    # Searches running at once (threads). Below the number of concurrent clients, requests
    # queue in the server while other processes take the CPU (bench_serve, 8 clients).
    max_concurrency: int = 8
    max_waiting: int = 64  # requests queued behind them before answering 503


def check_text(value: Any, what: str) -> None:
    """A lone UTF-16 surrogate (half an emoji, cut by a client) is no text: the store and
    the JSON answer cannot encode it, so it is the caller's mistake, not a crash."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise RequestError(
            f"{what} holds a lone UTF-16 surrogate (part of a character)",
            hint="send valid UTF-8 text",
        ) from None


def check_repository_name(name: Any) -> str:
    """A repository as the caller named it, exactly: a name that is not one is a 400, never
    read as another (`hugo-docs' --` is not `hugo-docs`, `../../etc` not `etc`)."""
    if isinstance(name, str) and is_valid_repository_name(name):
        return name
    guess = repository_name(name) if isinstance(name, str) else ""
    hint = (
        (f"did you mean {guess!r}? " if guess != name and is_valid_repository_name(guess) else "")
        + "repository names are 3-63 lower-case letters, digits and dashes "
        "(GET /repositories lists them)"
    )
    raise RequestError(f"invalid repository name {name!r}", hint=hint)


class DocsService:
    def __init__(
        self, settings: Settings, *, store: Store | None = None, limits: Limits | None = None
    ) -> None:
        self.settings = settings
        self.store = store if store is not None else Store(settings)
        self.limits = limits or Limits()
        self._pool: ThreadPoolExecutor | None = None
        self._waiting = 0

    # -- running blocking work off the event loop, with a cap --------------------------

    def _threads(self) -> ThreadPoolExecutor:
        """`max_concurrency` threads of the service's own, kept for its life: a thread
        pool that lets idle threads go (anyio's, after 10 s) makes the next request wait
        for a new one, and a new thread waits a whole scheduling period on a busy machine."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                self.limits.max_concurrency, thread_name_prefix="search"
            )
        return self._pool

    def start_threads(self) -> None:
        """Every search thread started now, before the first request."""
        count = self.limits.max_concurrency
        started = threading.Barrier(count + 1)
        pool = self._threads()
        for _ in range(count):  # each blocks until all are up, so each gets its own thread
            pool.submit(started.wait, 60)
        started.wait(60)

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if self._waiting >= self.limits.max_concurrency + self.limits.max_waiting:
            raise Busy("the server is busy", hint="retry in a moment")
        self._waiting += 1
        try:
            return await asyncio.wrap_future(self._threads().submit(fn, *args, **kwargs))
        finally:
            self._waiting -= 1

    def warm_up(self) -> None:
        """Pay before the first request what the first searches would: the tokenizer and
        onnxruntime's first runs, each collection opened with its vector index loaded, each
        BM25 in-memory copy, the query-language and exact-match look-ups, the links prior.
        Real searches over every served repository do all of it (with every access level,
        so every collection is touched; their answers go nowhere)."""
        self.start_threads()
        self.store.embedder.embed(["warm up"])
        served = self.served_names()
        if not served:
            return
        levels = sorted(ACCESS_LEVELS)
        for query in WARM_UP_QUERIES:
            for group in GROUPS:
                hybrid_search(
                    self.store,
                    SearchRequest(
                        query,
                        self.default_k,
                        repositories=served,
                        access_levels=levels,
                        group_by=group,
                    ),
                )

    def public_message(self, exc: BaseException) -> str:
        """An error's sentence as a remote caller may read it: the server's directories
        named by what they are, no credentials."""
        s = self.settings
        places = server_places(
            [
                ("docs root", s.docs_root),
                ("chroma data", s.chroma_path),
                ("state dir", s.resolved_state_dir),
                ("model dir", s.resolved_model_dir),
            ]
        )
        return hide_paths(str(exc), places)

    def ready(self) -> bool:
        return self.store.chroma.health_check()

    @property
    def max_k(self) -> int:
        return min(self.limits.max_k, self.settings.max_top_k)

    @property
    def default_k(self) -> int:
        """`default_top_k`, within what a server answers (a larger setting gets the limit)."""
        return min(self.settings.default_top_k, self.max_k)

    # -- search --------------------------------------------------------------------

    def check_query(self, query: str | None, k: int | None) -> tuple[str, int]:
        text = (query or "").strip()
        if not text:
            raise RequestError("the query is empty", hint="give some words to search for")
        if len(text) > self.limits.max_query_chars:
            raise RequestError(
                f"the query is {len(text)} characters, above the limit of "
                f"{self.limits.max_query_chars}"
            )
        check_text(text, "the query")
        k = self.default_k if k is None else k
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.max_k:
            raise RequestError(f"k must be an integer from 1 to {self.max_k}, got {k!r}")
        return text, k

    def search(self, request: SearchRequest) -> dict[str, Any]:
        """`request` as a remote caller sent it (its `access_levels` the caller's key's),
        checked against what this server serves, answered."""
        started = time.perf_counter()
        text, k = self.check_query(request.query, request.top_k)
        group = self.settings.group_by if request.group_by is None else request.group_by
        filters, lang = request.filters, request.lang
        repositories = list(request.repositories) if request.repositories else None
        levels = caller_levels(request.access_levels)  # None: PUBLIC only
        if group not in GROUPS:
            raise RequestError(f"group must be one of {', '.join(GROUPS)}, got {group!r}")
        if filters is not None and not isinstance(filters, dict):
            raise RequestError(
                "filters must be a JSON object", hint='e.g. {"section": "functions"}'
            )
        check_text([filters, repositories, lang, request.version], "the request")
        for name in repositories or []:
            check_repository_name(name)
        served = self.served_names()
        versioned = request.version is not None and bool(str(request.version).strip())
        visible = self._visible_plans(levels, served) if repositories or versioned else {}
        universe = list(visible) if versioned else served
        names = list(repositories) if repositories else self._having(universe, request.version)
        names = [n for n in names if n in served]
        if versioned:  # what a version's error names (its labels) is the caller's only
            names = [n for n in names if n in visible]
        # Named repositories this caller cannot search: missing and hidden ones alike, so the
        # answer says nothing about which exists.
        unknown = sorted(set(repositories) - set(visible)) if repositories else []
        wanted_lang = lang.strip().lower() if lang and lang.strip() else None
        try:
            # The language is a store-side filter (hetriever.search): None keeps each
            # multilingual site's default language (or the query's own), "all" any.
            result = hybrid_search(
                self.store,
                replace(
                    request,
                    query=text,
                    top_k=k,
                    repositories=names,
                    access_levels=sorted(levels),
                    group_by=group,
                    lang=wanted_lang,
                ),
            )
        except (InvalidFilterError, InvalidLimitError) as exc:
            raise RequestError(self.public_message(exc)) from None
        matches = result.matches[:k]
        content_dir = self.settings.content_dir
        sites = published.base_urls_of(self.store.catalog, matches, self.settings.site_urls)
        return {
            "query": text,
            "k": k,
            "group": group,
            "mode": result.mode,
            **({"query_language": result.query_language} if result.query_language else {}),
            "search_ms": round(result.search_time_ms, 2),
            "took_ms": round((time.perf_counter() - started) * 1000.0, 2),
            "results": [
                pages.match_view(m, content_dir, sites[str(m.metadata.get("repository", ""))])
                for m in matches
            ],
            "facets": result.facets,
            **({"unknown_repositories": unknown} if unknown else {}),
            "_result": result,  # for metrics; dropped before answering
        }

    # -- pages ---------------------------------------------------------------------

    def page(
        self, ref: str, *, levels: frozenset[str] | None = None, version: str | None = None
    ) -> dict[str, Any]:
        """A page's chunks in order, by page id, chunk id or URL; a URL names the page of the
        checked-out tree, or of `version` (a label) where given."""
        levels = levels or caller_levels(None)
        ref = (ref or "").strip()
        if not ref or len(ref) > 2048:
            raise RequestError("give a page id (<repository>/<file_path>), a chunk id or a URL")
        check_text([ref, version], "the page reference")
        visible = self._visible_plans(levels)
        found: list[Any] = []
        if pages.is_chunk_id(ref):
            doc = self.store.reads.get_by_id(ref)
            name = str(doc.metadata.get("repository", "")) if doc is not None else ""
            if doc is not None and name in visible:
                found = self._file_chunks(name, str(doc.metadata["file_path"]))
        elif "://" in ref or ref.startswith("/"):
            at = self._page_at(ref, self._of_version(visible, version))
            if at is not None:
                found = self._file_chunks(*at)
        else:
            parts = pages.split_page_id(ref)
            if parts and parts[0] in visible:
                found = self._file_chunks(*parts)
        chunks = []
        for doc in found:
            plan = visible.get(str(doc.metadata.get("repository", "")))
            if plan is not None and denial(plan, doc.metadata, levels) is None:
                chunks.append(doc)
        if not chunks:
            raise NotFound(f"no page {ref!r}")
        chunks.sort(key=lambda d: (int(d.metadata.get("chunk_index", 0)), d.doc_id))
        meta = chunks[0].metadata
        url, lang = str(meta.get("url", "")), published.language(meta, self.settings.content_dir)
        name = str(meta.get("repository", ""))
        return {
            "page_id": pages.page_id(meta),
            "title": meta.get("title", ""),
            "url": url,
            "link": published.full_link(url, lang, self._base_urls(name)),
            "repository": name,
            "version": self._label(name),
            "file_path": meta.get("file_path", ""),
            "lang": lang,
            "chunks": [
                {
                    "chunk_id": d.doc_id,
                    "index": d.metadata.get("chunk_index", 0),
                    "heading": d.metadata.get("heading_context", ""),
                    "text": pages.passage(d.content, d.metadata),
                }
                for d in chunks
            ],
        }

    def _file_chunks(self, name: str, path: str) -> list[Any]:
        """A file's chunks as one version: the ids BM25 last committed for it, read from Chroma.

        Chroma alone would show both versions of a file an ingest is rewriting (its new chunks
        are written before the replaced ones are deleted, so a crash never loses a page). BM25
        commits a file's old ids for its new ones at once, after Chroma holds the new ones; an
        id Chroma no longer has means the commit is moments away, so the read is tried again.
        Chroma's own list is the answer when BM25 cannot give one (damaged, or behind Chroma
        after a crash until the next ingest heals it).
        """
        for attempt in range(PAGE_READ_ATTEMPTS):
            try:
                ids = sorted(self.store.search_bm25(name).ids_where({"file_path": path}))
            except HetrieverError:
                break
            found = self.store.reads.chunks_by_ids(name, ids)
            if ids and len(found) == len(ids):
                return found
            if not ids:
                break
            time.sleep(PAGE_READ_PAUSE * (attempt + 1))
        return self.store.reads.chunks_where(name, {"file_path": path})

    def _trees(self, names: list[str]) -> list[str]:
        """`names` less the versions (`hetriever.core.versions`): each repository's tree."""
        known = versions_of(self.store.catalog)
        return [n for n in names if n not in known]

    def _having(self, served: list[str], version: Any) -> list[str]:
        """The repositories a search naming none reads in `version`: each tree (the search
        picks its versions, `hetriever.search.version_scope`), those with a version of a
        label only (a missing one is no mistake here, as it is where one is named)."""
        trees = self._trees(served)
        try:
            wanted = wanted_version(version)
            if wanted is None or wanted == ALL:
                return trees
            scope = version_scope(self.store.catalog, trees, served, named=False, version=wanted)
        except InvalidFilterError as exc:
            raise RequestError(self.public_message(exc)) from None
        return list(dict.fromkeys(scope.bases[n] for n in scope.names))

    def _label(self, name: str) -> str:
        record = self.store.catalog.repository(name)
        version = version_from_settings(record.settings if record else None)
        return version.label if version else ""

    def _of_version(self, visible: dict[str, Any], version: str | None) -> dict[str, Any]:
        """The visible repositories a URL is looked up in: the trees, or the versions
        `version` names (through the search's own scope, so a missing one says so)."""
        wanted = wanted_version(version)
        trees = self._trees(list(visible))
        if wanted is None:
            return {n: visible[n] for n in trees}
        try:
            scope = version_scope(
                self.store.catalog, trees, list(visible), named=False, version=wanted
            )
        except InvalidFilterError as exc:
            raise RequestError(self.public_message(exc)) from None
        return {n: visible[n] for n in scope.names if n in visible}

    def diff(
        self, repository: str, old: str, new: str, *, levels: frozenset[str] | None = None
    ) -> dict[str, Any]:
        """The published pages that differ between two indexed versions of `repository`."""
        from hetriever.search.version_diff import version_diff

        check_repository_name(repository)
        check_text([old, new], "the versions")
        levels = levels or caller_levels(None)
        if repository not in self._visible_plans(levels):  # hidden reads as absent
            raise NotFound(f"no repository {repository!r}")
        try:
            diff = version_diff(self.store, repository, old, new, levels=levels)
        except InvalidFilterError as exc:
            raise RequestError(self.public_message(exc)) from None
        return {**diff.to_dict(), "counts": diff.counts}

    def _base_urls(self, name: str) -> dict[str, str]:
        return published.recorded_base_urls(self.store.catalog, name, self.settings.site_urls)

    def served_names(self) -> list[str]:
        """Repositories with a complete index: a run finished with its commit recorded, or no
        run recorded at all (an index written before the catalog kept runs)."""
        return [name for name in self.store.repository_names() if self.store.catalog.complete(name)]

    def _visible_plans(
        self, levels: frozenset[str], served: list[str] | None = None
    ) -> dict[str, Any]:
        """Served repositories (`served` when the caller has them) the caller may see."""
        plans = plan_collections(self.store, self.served_names() if served is None else served)
        return {name: p for name, p in plans.items() if p.visible(levels)}

    def _page_at(self, ref: str, visible: dict[str, Any]) -> tuple[str, str] | None:
        """(repository, file path) of the page a URL names: by the catalog's address keys (its
        URL or an alias, any case, with or without host), else by the `url` of its chunks (an
        index written before pages had address keys)."""
        physical = {plan.collection: name for name, plan in visible.items()}
        try:
            parts = urlsplit(ref)
        except ValueError:  # e.g. an unclosed IPv6 host: names no page
            return None
        found = [
            (physical[hit.collection], hit)
            for hit in self.store.catalog.pages.lookup_title(ref, list(physical))
            if hit.kind in ("url", "alias")
        ]
        if len(found) > 1:  # pages at one path: a multihost site's languages, two sites
            found = self._by_preference(found[:8], address_host(ref), visible)
        if found:
            return found[0][0], found[0][1].path
        url = parts.path or "/"
        for name in visible:
            hits = self._by_url(name, url)
            if hits:
                return name, str(hits[0].metadata["file_path"])
        return None

    def _by_preference(
        self, found: list[tuple[str, Any]], host: str, visible: dict[str, Any]
    ) -> list[tuple[str, Any]]:
        """(repository, title hit) pairs ordered by `published.preference` of their pages (a
        page gone since counts as neither); one chunk read and one catalog read a repository."""
        names = {name for name, _ in found}
        metadata = {
            (name, d.doc_id): d.metadata
            for name in names
            for d in self.store.reads.chunks_by_ids(
                name, [hit.chunk_id for n, hit in found if n == name]
            )
        }
        sites = {name: self._base_urls(name) for name in names}

        def rank(pair: tuple[str, Any]) -> int:
            name, hit = pair
            meta = metadata.get((name, hit.chunk_id))
            return (
                2
                if meta is None
                else published.preference(
                    meta, host, sites[name], visible[name].languages, self.settings.content_dir
                )
            )

        return sorted(found, key=rank)

    def _by_url(self, name: str, url: str) -> list[Any]:
        variants = dict.fromkeys([url, url.rstrip("/") + "/", url.rstrip("/") or "/"])
        for candidate in variants:
            hits = self.store.reads.chunks_where(name, {"url": candidate})
            if hits:
                return hits
        return []

    # -- repositories ----------------------------------------------------------------

    def repositories(self, *, levels: frozenset[str] | None = None) -> list[dict[str, Any]]:
        """Visible repositories: indexed commit, checked-out commit and what waits upstream
        (as of the last fetch; when the docs root is here), files and chunks; a version says
        its label and its base repository (a version is visible only where its base is)."""
        from hetriever.index.status import repository_status

        levels = levels or caller_levels(None)
        here = self._checkouts()
        return [
            repository_status(
                self.store.catalog, name, plan.collection, plan.declared, repo=here.get(name)
            ).served()
            for name, plan in sorted(self._visible_plans(levels).items())
        ]

    def _checkouts(self) -> dict[str, Any]:
        """The repositories whose checkouts are here (the docs root beside this server)."""
        from hetriever.discover.repositories import configured_repositories

        try:
            repos = configured_repositories(self.settings)
        except HetrieverError:  # no docs root beside this server: commits unknown, not an error
            return {}
        return {repo.name: repo for repo in repos}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self.store.close_sync()
