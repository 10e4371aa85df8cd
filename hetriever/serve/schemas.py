"""The HTTP API's answers as pydantic models: the typed schemas of `/openapi.json`.

The routes build their JSON with `DocsService` (shared with the MCP server) and answer it as
it is; these models document it, field by field, for every endpoint. tests/serve/test_web.py
checks that a real answer has exactly the fields its model names.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Translation(_Answer):
    lang: str
    url: str = Field(description="site-relative path of the page in that language")
    link: str = Field(description="its full address where the site's baseURL is known")
    title: str


class MorePassage(_Answer):
    chunk_id: str
    heading: str = Field(description="the passage's heading path, `H2 > H3`")
    passage: str


class VersionHeld(_Answer):
    version: str = Field(description="a version label, or `current` for the checked-out tree")
    repository: str
    differs: bool = Field(description="its source differs from the shown result's")


class SearchHit(_Answer):
    page_id: str = Field(description="`<repository>/<file_path>`, for GET /pages/{id}")
    chunk_id: str
    title: str
    url: str = Field(description="the page's site-relative path, e.g. /docs/functions/where/")
    link: str = Field(
        description="the page's full address when the site's baseURL is an "
        "absolute http(s) one, else the same path as `url`"
    )
    repository: str
    file_path: str
    heading: str = Field(description="the passage's heading path, `H2 > H3`; '' at the top")
    anchor: str = Field(
        description="the id of the passage's section heading on the "
        "published page; '' at the page's top"
    )
    heading_link: str = Field(description="`link` at that section: `link#anchor`")
    section: str = Field(description="the page's Hugo section (first folder under content)")
    lang: str
    translations: list[Translation]
    passage: str = Field(description="the best matching passage, plain text")
    score: float = Field(ge=0, le=1)
    source: Literal["hybrid", "dense", "bm25", "exact"]
    dense_score: float | None
    bm25_score: float | None
    more: list[MorePassage] = Field(description="a page result's next best passages")
    version: str = Field(
        "", description="the version the result is from (a label); '' for the checked-out tree"
    )
    versions: list[VersionHeld] = Field(
        [], description="with `version=all`: the versions holding the page"
    )


class FacetValue(_Answer):
    value: str
    count: int = Field(description="candidate pages with this value")


class Facets(_Answer):
    """Candidate pages of the search (all it fused, not only the results returned) per
    value: narrow with `repository`, `lang` or `filter={"section": ...}`."""

    repository: list[FacetValue] = []
    lang: list[FacetValue] = []
    section: list[FacetValue] = []


class SearchAnswer(_Answer):
    query: str
    k: int
    group: Literal["page", "chunk"]
    mode: Literal["hybrid", "dense", "bm25"] = Field(description="what actually ran")
    query_language: str | None = Field(
        None,
        description="present when a search told no "
        "language kept to the one the query is written in",
    )
    search_ms: float
    took_ms: float
    results: list[SearchHit]
    facets: Facets
    unknown_repositories: list[str] | None = Field(
        None,
        description="named repositories this caller cannot search (missing and "
        "hidden alike); present only when there are some",
    )
    query_id: str | None = Field(
        None,
        description="with search analytics on: the id to send to POST /analytics/open "
        "when the reader opens a result",
    )


class PageChunk(_Answer):
    chunk_id: str
    index: int
    heading: str
    text: str


class PageAnswer(_Answer):
    page_id: str
    title: str
    url: str
    link: str
    repository: str
    file_path: str
    version: str = Field("", description="the version's label; '' for the checked-out tree")
    lang: str
    chunks: list[PageChunk]


class PageChangeAnswer(_Answer):
    kind: Literal["A", "M", "D", "R"] = Field(
        description="added, modified, deleted or renamed (from `old_path`)"
    )
    path: str = Field(description="the file in the newer version (a deleted page's older one)")
    old_path: str
    url: str = Field(description="the page's site-relative path where it is published")
    title: str
    old_url: str = Field(description="a renamed page's path in the older version")


class DiffAnswer(_Answer):
    repository: str
    from_version: str
    to_version: str
    from_commit: str
    to_commit: str
    changes: list[PageChangeAnswer]
    counts: dict[str, int]


class Repository(_Answer):
    repository: str
    url: str = Field(description="its remote without credentials; '' for a local clone")
    access_level: str
    indexed_commit: str
    checked_out_commit: str | None
    up_to_date: bool | None
    upstream_ref: str
    upstream_commit: str
    behind_upstream: int | None
    ahead_of_upstream: int | None = Field(
        None,
        description="indexed commits the followed branch no longer has (it was moved "
        "back or rewritten); null when not known",
    )
    upstream_note: str = Field(
        "",
        description="what such a move means and the command that accepts it; '' when there is none",
    )
    upstream_error: str
    files: int
    chunks: int
    last_run_at: str
    last_run_outcome: str
    version: str = Field("", description="a version's label (`v0.140.0`); '' for a checkout")
    ref: str = Field("", description="the git ref a version follows; '' for a checkout")
    version_of: str = Field("", description="the repository it is a version of; '' for one")


class RepositoriesAnswer(_Answer):
    repositories: list[Repository]


class Status(_Answer):
    status: Literal["ok", "ready", "unavailable"]


class ErrorAnswer(_Answer):
    error: str = Field(description="one sentence saying what went wrong")
