"""What the catalog holds (its tables are defined in `catalog_schema`): the file states,
physical collection names, the exact-match title keys, and the records it returns.
`hetriever.store.catalog` reads and writes them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from hetriever.chunk.sections import section_starts
from hetriever.store.bm25.analyzer import tokenize

# A collection's index state: the commit it holds, whether a run is writing it, and the totals
# of the last complete run. The catalog is their one record (`Catalog.index_state`); the
# store's collection metadata shows them beside Chroma's own (model, dimensions, schema).
INDEX_STATE_DEFAULTS: dict[str, Any] = {
    "repository_url": "",
    "commit_hash": "",
    "last_updated": "",
    "total_documents": 0,
    "total_chunks": 0,
}
INDEX_STATE_KEYS = frozenset(INDEX_STATE_DEFAULTS) | {"index_status", "indexing_commit"}

DISCOVERED, PROCESSED, INDEXED = "DISCOVERED", "PROCESSED", "INDEXED"
SKIPPED, FAILED, DELETED = "SKIPPED", "FAILED", "DELETED"
FILE_STATES = (DISCOVERED, PROCESSED, INDEXED, SKIPPED, FAILED, DELETED)
BUILDING, ACTIVE = "building", "active"

# Physical collection names: the repository name, then `_v<generation>`. Repository names never
# hold an underscore, so the split is unambiguous (Chroma allows `_` inside names).
PHYSICAL_RE = re.compile(r"^(?P<repo>[a-z0-9][a-z0-9-]*[a-z0-9])_v(?P<gen>[0-9]+)$")

# Exact-match kinds, best first: a title beats a function name, which beats the page's URL,
# which beats an alias (an old URL Hugo redirects: a page served at an address beats another
# page's stale alias for it), which beats a description, which beats a section heading.
TITLE_KINDS = {
    "title": 0,
    "linkTitle": 1,
    "function": 2,
    "url": 3,
    "alias": 4,
    "description": 5,
    "heading": 6,
}
# A description or heading of one search term (`analyzer.tokenize`: stop words aside, CJK as
# character pairs, so Japanese and Chinese count too) is a label ("Overview", "Examples"),
# which a look-up by name would match on pages it does not name; titles serve those.
DESCRIPTION_MIN_TERMS = 2
# A heading of two terms is mostly a topic's name ("Asset pipelines" on the feature list,
# "Reference links" closing a hosting guide), which people also type meaning the topic's own
# page: it is a key from three terms on, or two when it asks a question ("Why is my page
# missing?"), the forms people copy from a table of contents.
HEADING_MIN_TERMS = 3
# Kinds that name a page only when no other page in scope has the same key: a summary or a
# section heading several pages share ("Get started in 5 minutes", "How can I use it?")
# names none of them.
UNIQUE_KINDS = frozenset({"description", "heading"})


def generation_collection_name(repository: str, generation: int) -> str:
    """The Chroma collection that holds `repository`'s generation `generation`."""
    return f"{repository}_v{generation}"


def split_physical(name: str) -> tuple[str, int] | None:
    """(repository, generation) of a physical collection name, or None for other names."""
    m = PHYSICAL_RE.match(name)
    return (m.group("repo"), int(m.group("gen"))) if m else None


def normalise_title(text: str) -> str:
    """The exact-match key: trimmed, case-folded, inner whitespace collapsed, leading and
    trailing dots, a final question or exclamation mark, surrounding quotes and every backtick
    dropped (`.Site.Params` and `site.params` are one key; a description's "the `title`
    property" is "the title property", as the page shows it; "Why is my page missing?" is
    found without its question mark)."""
    key = " ".join(str(text).replace("`", "").split()).casefold().strip("\"' ")
    return key.strip(".").rstrip("?!. ").strip()


# The first segment of an address pasted without its scheme ("gohugo.io/functions/"): a host.
_HOST = re.compile(r"[a-z0-9-]+(?:\.[a-z0-9-]+)+(?::[0-9]+)?", re.IGNORECASE)


def address_key(text: str) -> str:
    """The exact-match key of a page address as people paste it: a URL
    (`https://gohugo.io/functions/collections/where/#examples`), the same without its scheme,
    or a URL path (`/functions/where/`). The host, query and fragment go (the path names the
    page on the live site, a mirror or `hugo server` alike), so do `index.html` and the slashes
    at both ends; one leading slash keeps addresses apart from names (the page at
    `/documentation/` is not the page titled "Documentation"). A page's URL, its aliases and
    what was pasted meet in that form. "" when `text` is no address (it has spaces, or no
    slash) or names the site's root."""
    text = text.strip()
    if "/" not in text or any(ch.isspace() for ch in text):
        return ""
    try:
        parts = urlsplit(text)
    except ValueError:  # e.g. an unclosed IPv6 host: not an address of a page
        return ""
    if parts.scheme and (parts.scheme not in ("http", "https") or not parts.netloc):
        return ""  # mailto:, file:, a Windows drive...
    path = parts.path
    if not parts.netloc:
        head, _, rest = path.partition("/")
        path = rest if _HOST.fullmatch(head) else path
    path = unquote(path)
    if path.rsplit("/", 1)[-1] == "index.html":
        path = path[: -len("index.html")]
    path = normalise_title(path.strip("/"))
    return "/" + path if path else ""


def address_host(text: str) -> str:
    """The host of an address as `address_key` reads it (`https://fr.example.org/docs/` and
    `fr.example.org/docs/` alike), lower case with its port; "" for a path or no address."""
    if not address_key(text):
        return ""
    parts = urlsplit(text.strip())
    head = parts.netloc or parts.path.partition("/")[0]
    return head.lower() if parts.netloc or _HOST.fullmatch(head) else ""


def address_fragment(text: str) -> str:
    """The fragment of an address (`#define-in-front-matter`: a heading's anchor), "" for
    none or for text that is no address."""
    return unquote(text.strip().partition("#")[2]).casefold() if address_key(text) else ""


def title_keys(metadata: dict[str, Any]) -> list[tuple[str, str]]:
    """(kind, key) pairs a page is found under, from its first chunk's metadata.

    - title and linkTitle as written;
    - a function name: `collections.Where` is also `where`; a method page
      `methods/site/Params.md` titled `Params` is also `.Site.Params`;
    - the page's URL (`address_key`: what people and agents paste, with or without the host);
    - aliases (old URLs): the whole path and its last segment (`/functions/where` -> `where`);
    - the front matter description (of `DESCRIPTION_MIN_TERMS` terms or more): the summary a
      search engine shows under the page's link, so the text people and agents paste back.
    """
    out: list[tuple[str, str]] = []
    title = str(metadata.get("title") or "")
    for kind, value in (("title", title), ("linkTitle", metadata.get("linkTitle"))):
        if isinstance(value, str) and value.strip():
            out.append((kind, normalise_title(value)))
    if re.fullmatch(r"[A-Za-z]+\.[A-Za-z][A-Za-z0-9]*", title):
        out.append(("function", normalise_title(title.split(".", 1)[1])))
    parts = str(metadata.get("file_path") or "").split("/")
    if "methods" in parts[:-2] and re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", title):
        owner = parts[parts.index("methods") + 1].replace("-", "")
        out.append(("function", normalise_title(f".{owner}.{title}")))
    url = address_key(str(metadata.get("url") or ""))
    if url:
        out.append(("url", url))
    aliases = metadata.get("aliases")
    for alias in aliases if isinstance(aliases, list) else []:
        path = str(alias).strip().strip("/")
        if path:
            out.append(("alias", address_key("/" + path)))
            out.append(("alias", normalise_title(path.rsplit("/", 1)[-1])))
    description = metadata.get("description")
    if isinstance(description, str) and len(set(tokenize(description))) >= DESCRIPTION_MIN_TERMS:
        out.append(("description", normalise_title(description)))
    return [(kind, key) for kind, key in dict.fromkeys(out) if key]


def heading_keys(sections: Iterable[tuple[str, Any]]) -> list[tuple[str, str]]:
    """(key, chunk id) for each section heading of a page, from its chunks' (id, metadata) in
    page order: every heading of `heading_context` and of `merged_headings` (short sections
    the chunker folded into a neighbour) of `HEADING_MIN_TERMS` terms or more (a question:
    `DESCRIPTION_MIN_TERMS`), under the first chunk that carries it (the section's start, the
    passage a hit shows).

    A heading is what a page's table of contents and its anchor links show, so what people
    and agents copy from it (an FAQ's "How do I ...?", "Configure internal traces")."""
    out: dict[str, str] = {}
    for heading, chunk_id in section_starts(sections):
        key = normalise_title(heading)
        least = DESCRIPTION_MIN_TERMS if heading.rstrip().endswith("?") else HEADING_MIN_TERMS
        if key and key not in out and len(set(tokenize(heading))) >= least:
            out[key] = chunk_id
    return list(out.items())


@dataclass
class RepositoryRecord:
    name: str
    url: str = ""
    access_level: str = "PUBLIC"
    settings: dict[str, Any] = field(default_factory=dict)
    active_collection: str | None = None
    last_commit: str = ""
    last_run_at: str = ""
    last_run_outcome: str = ""


@dataclass
class CollectionRecord:
    name: str
    repository: str
    generation: int
    fingerprint: str
    state: str
    levels: list[str] = field(default_factory=list)
    created_at: str = ""
    index_state: dict[str, Any] = field(default_factory=dict)


@dataclass
class FileRecord:
    collection: str
    repository: str
    path: str
    state: str
    blob: str = ""
    last_commit: str = ""
    reason: str = ""
    chunk_count: int = 0
    deleted_at: str = ""
    updated_at: str = ""


def drop_shared(hits: list[TitleHit]) -> list[TitleHit]:
    """`hits` less the description and heading hits when more than one page has them."""
    for kind in UNIQUE_KINDS:
        if sum(h.kind == kind for h in hits) > 1:
            hits = [h for h in hits if h.kind != kind]
    return hits


@dataclass
class TitleHit:
    collection: str
    key: str
    kind: str
    path: str
    chunk_id: str
