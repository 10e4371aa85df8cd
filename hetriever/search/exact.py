"""The exact-match fast path of a search: the page a query names outright.

A query equal (trimmed, case-insensitive) to a page's title, linkTitle, function name, URL or
alias (a pasted address, with or without its host: catalog_records.address_key), description
(catalog_records.title_keys) or section heading (catalog_records.heading_keys), or a
function's name with the word for it ("where function", `_NAMED_FUNCTION`), returns that page
first (source "exact", score 1.0): its first chunk, or the chunk where the heading's section
starts; looked up in the catalog; the fused results follow, without duplicates
(`hetriever.search.hybrid`). A URL finds its page in the URL's language unless the search
names one, and shows the section its fragment names (a heading's anchor), if any; of pages at
one path (a multihost site's languages) the one published at its host, else the site's
default language's, as a page look-up by link (`hetriever.search.published.preference`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from hetriever.chunk.sections import ANCHORS_KEY, anchored_sections
from hetriever.core.access import CollectionPlan
from hetriever.core.logs import get_logger
from hetriever.core.models import SearchResult
from hetriever.parse.links import shown
from hetriever.search.candidates import _fill_documents, _Hit, _trusted, bounded_passage
from hetriever.search.published import preference, recorded_base_urls
from hetriever.store.catalog_records import (
    UNIQUE_KINDS,
    TitleHit,
    address_fragment,
    address_host,
    drop_shared,
)
from hetriever.store.filters import matches
from hetriever.store.store_types import RetrievalStore

log = get_logger(__name__)

ADDRESS_KINDS = ("url", "alias")  # exact-match kinds a pasted address finds
# "where function", "function where", "range func", ".Site.Params method": a template
# function or method named by one identifier and the word for what it is. The name alone is
# an exact key; with the word, BM25 and dense see a common word ("function" is on every
# function page) beside a name that may be one too ("range", "in", "with").
_NAMED_FUNCTION = re.compile(
    r"^\s*(?:(?P<before>[.$]?[A-Za-z][\w.]*)\s+(?:function|func|method)"
    r"|(?:function|func|method)\s+(?P<after>[.$]?[A-Za-z][\w.]*))\s*$",
    re.IGNORECASE,
)
# What such a name matches: a function's name (`where` for `collections.Where`, a method's
# `.Site.Params`) or an alias's last segment (`/functions/range`), not any page's title
# ("markup function" is not the Markup configuration page); a namespaced name
# (`collections.Where`) also matches titles (`_exact`).
NAME_KINDS = ("function", "alias")


def _exact(
    store: RetrievalStore,
    query: str,
    plans: Mapping[str, CollectionPlan],
    levels: frozenset[str],
    user_filter: dict | None,
    wanted_lang: str = "",
) -> SearchResult | None:
    """The page whose title / linkTitle / function name / URL / alias / description / section
    heading equals the query, if any. A description or heading names a page only when no
    other page the search may return has it (a translation that kept an English heading
    does not hide the English page from an English search)."""
    by_physical = {p.collection: name for name, p in plans.items()}
    try:
        candidates = store.catalog.pages.lookup_title(query, list(by_physical))
        form = _NAMED_FUNCTION.match(query) if not candidates else None
        if form:  # "where function": the page named `where`, if a name is what it is
            name = form.group("before") or form.group("after")
            candidates = [
                c
                for c in store.catalog.pages.lookup_title(name, list(by_physical), NAME_KINDS)
                if not c.key.startswith("/")
            ]
            if not candidates and "." in name.strip("."):  # `collections.Where`
                candidates = store.catalog.pages.lookup_title(name, list(by_physical), ("title",))
    except Exception as exc:  # the fast path is an extra; it never fails a search
        log.warning("exact_lookup_failed", error=f"{type(exc).__name__}: {exc}")
        return None

    def in_scope(group: list[TitleHit]) -> list[tuple[TitleHit, _Hit]]:
        hits = [(c, _Hit(c.chunk_id, by_physical[c.collection])) for c in group]
        _fill_documents(store, [hit for _, hit in hits])  # one read per collection
        return [
            (c, hit)
            for c, hit in hits
            if hit.metadata is not None
            and matches(user_filter, hit.metadata)
            and matches(
                plans[hit.collection].language_clause(_language(c, wanted_lang)), hit.metadata
            )
            and _trusted(hit, plans, levels)
        ]

    for candidate in candidates:  # a name: the first the caller may see (one read, usually)
        if candidate.kind not in UNIQUE_KINDS and candidate.kind not in ADDRESS_KINDS:
            for _, hit in in_scope([candidate]):
                return _exact_result(hit)
    addressed = in_scope([c for c in candidates if c.kind in ADDRESS_KINDS])
    if addressed:  # a pasted address: of the pages at its path, the one it names
        hit = _addressed(store, query, [hit for _, hit in addressed], plans)
        return _exact_result(_section(store, hit, address_fragment(query), plans, levels))
    kept = in_scope([c for c in candidates if c.kind in UNIQUE_KINDS])
    named = drop_shared([c for c, _ in kept])
    return next((_exact_result(hit) for c, hit in kept if c in named), None)


def _addressed(
    store: RetrievalStore, query: str, pages: list[_Hit], plans: Mapping[str, CollectionPlan]
) -> _Hit:
    """The page a pasted address names among those at its path (a multihost site publishes
    each language's at the same path, two sites may share one): as a page look-up by link
    (`hetriever.serve.service`), the one published at the address's host, else its site's
    default language's, else the first (`published.preference`)."""
    if len(pages) < 2:
        return pages[0]
    host = address_host(query)
    sites = {
        name: recorded_base_urls(store.catalog, name, store.settings.site_urls)
        for name in {page.collection for page in pages}
    }
    return min(
        pages,
        key=lambda page: preference(
            page.metadata or {},
            host,
            sites[page.collection],
            plans[page.collection].languages,
            store.settings.content_dir,
        ),
    )


def _section(
    store: RetrievalStore,
    page: _Hit,
    anchor: str,
    plans: Mapping[str, CollectionPlan],
    levels: frozenset[str],
) -> _Hit:
    """The first chunk of `page` under the heading whose anchor a pasted URL's fragment
    names (`/content-management/menus/#define-in-front-matter`), else `page` itself."""
    if not anchor or page.metadata is None:
        return page
    try:
        index = store.search_bm25(page.collection)
        chunks = index.metadata_of(
            index.ids_where({"file_path": page.metadata["file_path"]}),
            keys=("heading_context", "merged_headings", "chunk_index", ANCHORS_KEY),
        )
    except Exception as exc:  # the section is an extra: the page is still the answer
        log.warning("exact_section_failed", error=f"{type(exc).__name__}: {exc}")
        return page
    doc_id = _anchored(
        anchored_sections(sorted(chunks.items(), key=lambda c: (c[1].get("chunk_index", 0), c[0]))),
        anchor,
    )
    if doc_id is None:
        return page
    section = _Hit(doc_id, page.collection)
    _fill_documents(store, [section])
    return section if section.metadata is not None and _trusted(section, plans, levels) else page


def _anchored(starts: Mapping[str, list[str]], anchor: str) -> str | None:
    """The chunk an anchor names: its heading's first section, or for `<anchor>-<n>` (Hugo
    numbers a repeated heading's anchors) its (n+1)th."""
    if anchor in starts:
        return starts[anchor][0]
    base, _, number = anchor.rpartition("-")
    if base and number.isdigit() and int(number) < len(starts.get(base, ())):
        return starts[base][int(number)]
    return None


def _language(hit: TitleHit, wanted: str) -> str:
    """The language an exact hit must be in: the search's, except that a pasted URL names its
    page in whatever language the URL is (`/ja/docs/`) unless the caller asked for one."""
    return "all" if hit.kind == "url" and not wanted else wanted


def _exact_result(hit: _Hit) -> SearchResult:
    return SearchResult(
        doc_id=hit.doc_id,
        content=bounded_passage(hit.content or ""),
        metadata=shown(hit.metadata or {}),
        score=1.0,
        source="exact",
    )
