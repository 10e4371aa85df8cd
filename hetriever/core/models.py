"""The plain data that flows between the pipeline's stages.

discover -> `ChangeSet` (a `Repository` is the discover stage's own: discover/repositories.py)
parse    -> `Page` (the parse stage's own: parse/parsed_page.py)
chunk    -> `Chunk`
store    -> `Document`, `SearchResult`, `RetrievalResult`
indexing -> `IndexResult`

Everything here is a dataclass of JSON-friendly values (`to_dict()`), so tasks can pass it
between processes (Dask) and flows can print it in artifacts.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

# What Chroma accepts as one metadata value. Lists must be non-empty and of one type.
MetadataScalar = str | int | float | bool
MetadataValue = MetadataScalar | list[str] | list[int] | list[float] | list[bool]
Metadata = dict[str, MetadataValue]


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return value.as_posix()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    return value


class _Serialisable:
    def to_dict(self) -> dict[str, Any]:
        return _jsonable(self)


# --- discover ----------------------------------------------------------------------


class ChangeKind(str, enum.Enum):  # noqa: UP042 (StrEnum would change str() of a member)
    ADDED = "A"
    MODIFIED = "M"
    DELETED = "D"
    RENAMED = "R"


@dataclass(frozen=True)
class FileChange(_Serialisable):
    kind: ChangeKind
    path: str  # repo-relative POSIX path; for renames, the new path
    old_path: str | None = None  # for renames, the old path


IndexMode = Literal[
    "full", "incremental", "noop", "dropped"
]  # dropped: a version whose ref is gone


@dataclass
class ChangeSet(_Serialisable):
    """What must happen to one repository's index to bring it to `new_commit`."""

    repository: str
    old_commit: str | None  # last successfully indexed commit; None = never indexed
    new_commit: str
    mode: IndexMode
    changes: list[FileChange] = field(default_factory=list)
    # Content files of the tree at new_commit that cannot be indexed, with reasons
    # (binary, non-UTF-8, too large, symlink out of the repo, ...).
    skipped: list[SkippedFile] = field(default_factory=list)
    dirty: bool = False  # the working tree had uncommitted changes (they are ignored)
    # Pages git did not change but that include a changed snippet (counted as modified in
    # `changes`, reported apart so "files modified" matches `git diff`).
    include_dependents: list[str] = field(default_factory=list)

    def paths_to_index(self) -> list[str]:
        """Files whose (new) content must be parsed and written."""
        return [c.path for c in self.changes if c.kind is not ChangeKind.DELETED]

    def paths_to_delete(self) -> list[str]:
        """Files whose old chunks must go: deleted files and the old side of renames."""
        out = [c.path for c in self.changes if c.kind is ChangeKind.DELETED]
        out += [c.old_path for c in self.changes if c.kind is ChangeKind.RENAMED and c.old_path]
        return out

    def counts(self) -> dict[str, int]:
        counts = {kind.name.lower(): 0 for kind in ChangeKind}
        for change in self.changes:
            counts[change.kind.name.lower()] += 1
        return counts


@dataclass(frozen=True)
class SkippedFile(_Serialisable):
    path: str
    reason: str


# --- clean -------------------------------------------------------------------------

BlockKind = Literal["heading", "paragraph", "code"]


@dataclass(frozen=True)
class Block(_Serialisable):
    """One structural piece of a cleaned page, in document order.

    heading:   `text` is the heading's plain text, `level` 1..6, `anchor` the id its author
               gave it (`## Settings {#settings-asciidoc}`), "" when Hugo makes one up.
    paragraph: plain text (Markdown, HTML and shortcode markup removed; lists, tables and
               quotes flattened to lines of text).
    code:      a fenced code block exactly as written, fences included ("```go\n...\n```").
    """

    kind: BlockKind
    text: str
    level: int = 0
    anchor: str = ""


# --- chunk -------------------------------------------------------------------------


@dataclass(frozen=True)
class Chunk(_Serialisable):
    """One unit of retrieval. `text` is exactly what is embedded, BM25-indexed and stored."""

    id: str  # deterministic: same repository, file and content -> same id
    text: str
    metadata: Metadata  # see REQUIRED_CHUNK_METADATA

    @property
    def repository(self) -> str:
        return str(self.metadata["repository"])

    @property
    def file_path(self) -> str:
        return str(self.metadata["file_path"])

    @property
    def content_hash(self) -> str:
        return str(self.metadata["content_hash"])


# Every chunk carries these metadata keys (all Chroma-valid: no None, no empty list;
# `tags` is omitted rather than empty).
REQUIRED_CHUNK_METADATA = (
    "repository",
    "file_path",
    "url",
    "title",
    "section",
    "heading_context",
    "chunk_index",
    "has_code",
    "content_hash",
)


# --- store / search ----------------------------------------------------------------


@dataclass
class Document(_Serialisable):
    """A stored item as `get_by_id` returns it."""

    doc_id: str
    content: str
    metadata: Metadata = field(default_factory=dict)


@dataclass
class SearchResult(_Serialisable):
    doc_id: str
    content: str
    metadata: Metadata
    score: float  # in [0, 1], higher is better
    source: str  # "dense", "bm25" or "hybrid" (found by both), "exact" for title hits
    dense_score: float | None = None  # cosine similarity mapped to [0, 1]
    bm25_score: float | None = None  # BM25 normalised to [0, 1] within the candidate set
    rrf_score: float | None = None  # raw fused score: RRF, or weighted z-scores (fusion "score")
    # Page results: the page's next best chunks after this one, as
    # {"doc_id", "heading_context", "content"}; empty for chunk results.
    passages: list[dict[str, Any]] = field(default_factory=list)
    # The page in the site's other languages, as {"lang", "url", "title"} (multilingual sites;
    # empty otherwise).
    translations: list[dict[str, Any]] = field(default_factory=list)
    # The version of its repository the result is from (`hetriever.core.versions`): its
    # label (`v0.139.0`), "" for the checked-out tree.
    version: str = ""
    # A search of every version: the versions holding this page, as {"version",
    # "repository", "differs"} ("current" for the checked-out tree; `differs`: its source
    # is not this result's); empty otherwise.
    versions: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RetrievalResult(_Serialisable):
    query: str
    matches: list[SearchResult]
    total_results: int
    search_time_ms: float
    mode: str = "hybrid"  # "hybrid", "dense" or "bm25" (what actually ran)
    retriever_counts: dict[str, int] = field(default_factory=dict)
    # Told no language, the search kept to the one the query is written in (its script or
    # words, `hetriever.search.query_language`): that language; "" otherwise.
    query_language: str = ""
    # Candidate pages per repository, language and section, as {facet: [{"value", "count"}]}
    # (`hetriever.search.facets`): what a caller can narrow the search by.
    facets: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


# --- indexing ----------------------------------------------------------------------


@dataclass
class IndexResult(_Serialisable):
    """Counts of one repository's index run; the flow, the CLI and the artifacts print it."""

    repository: str
    mode: IndexMode
    old_commit: str | None
    new_commit: str
    files_added: int = 0
    files_modified: int = 0
    files_deleted: int = 0
    files_renamed: int = 0
    files_include_dependent: int = 0  # unchanged pages re-indexed for a changed snippet
    # Unchanged files processed again because a publish or expiry date passed since the last
    # run (`hetriever.index.publish_windows`).
    files_republished: int = 0
    files_indexed: int = 0
    skipped: list[SkippedFile] = field(default_factory=list)
    chunks_written: int = 0  # new or changed chunks embedded and written
    chunks_reused: int = 0  # unchanged chunks kept without re-embedding
    # of chunks_written, those whose vectors another version held (embedded once across them)
    chunks_borrowed: int = 0
    chunks_deleted: int = 0
    embedding_seconds: float = 0.0
    total_seconds: float = 0.0
    completed: bool = False  # True only once the new commit was recorded
    # Files that could not be stored (e.g. embedding failed after retries): they keep their
    # previous chunks and the commit is not recorded, so the next run tries them again.
    failed: list[SkippedFile] = field(default_factory=list)

    @property
    def files_skipped(self) -> int:
        return len(self.skipped)
