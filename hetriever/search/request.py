"""A search as every edge asks it: the CLI, the query flow, the resident search process, the
HTTP API and the MCP server each parse their own input into one `SearchRequest`, and
`hetriever.search.hybrid` answers it.

The request holds what the caller said; None means "not said", and the settings decide
(`default_top_k`, `use_hybrid_search`, `group_by`, `search_language`; `version`: the
checked-out tree). Checking is the
answerer's: hybrid search checks the request against the settings (a bad filter, k, group or
language is an InvalidFilterError or InvalidLimitError), the service checks it against what
it serves (its limits, the repositories it serves) first.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["SearchRequest"]


@dataclass(frozen=True)
class SearchRequest:
    query: str
    top_k: int | None = None
    filters: dict[str, Any] | None = None  # a metadata filter (`hetriever.store.filters`)
    repositories: Sequence[str] | None = None  # None: every repository in scope
    hybrid: bool | None = None  # dense and BM25 fused; False: dense only
    # The levels the caller may see, as a list or "A,B" (`core.access.caller_levels`);
    # None: PUBLIC only.
    access_levels: Collection[str] | str | None = None
    exact: bool = True  # the exact-title fast path
    group_by: str | None = None  # "page" (one result per page) or "chunk"
    # A language code, "all", or "" for the query's own language where it names a
    # multilingual site's (`hetriever.search.query_language`), else that site's default.
    lang: str | None = None
    # Which version of each repository (`hetriever.core.versions`): None or "current" its
    # checked-out tree, a label (`v0.139.0`) that version, "all" every one, a page's
    # versions one result (`hetriever.search.version_scope`).
    version: str | None = None
