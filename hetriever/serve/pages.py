"""Search matches as the served API shows them: page ids, passages, languages and links.

A page is one (repository, file_path); its id is `<repository>/<file_path>` (repository names
have no `/`, so the first one splits it). Search groups results by page itself; these are pure
functions over `SearchResult`s so the HTTP API and the MCP server answer alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from hetriever.models import SearchResult

CONTEXT_SEPARATOR = " > "  # as hetriever.chunk joins a chunk's title and headings
BODY_SEPARATOR = "\n\n"
DEFAULT_LANGUAGE = "en"  # Hugo's default content language
_LANGUAGE = re.compile(r"^[a-z]{2,3}(-[a-z0-9]{2,8})?$")
_CHUNK_ID = re.compile(r"^[0-9a-f]{32}([0-9a-f]{32})?$")


def page_id(metadata: Mapping[str, Any]) -> str:
    return f"{metadata.get('repository', '')}/{metadata.get('file_path', '')}"


def split_page_id(value: str) -> tuple[str, str] | None:
    """(repository, file_path) of a page id, or None when it is not one."""
    repository, sep, path = value.strip().strip("/").partition("/")
    if not sep or not repository or not path:
        return None
    return repository, path


def is_chunk_id(value: str) -> bool:
    return bool(_CHUNK_ID.match(value.strip()))


def passage(content: str, metadata: Mapping[str, Any]) -> str:
    """A chunk's text without the `title > headings` line the chunker puts before it (a page
    record: without its title line)."""
    title = str(metadata.get("title") or "")
    if metadata.get("page_record") and content.startswith(title + "\n"):
        return content[len(title) + 1:]
    prefix = CONTEXT_SEPARATOR.join(
        p for p in (str(metadata.get("title") or ""), str(metadata.get("heading_context") or ""))
        if p.strip())
    if prefix and content.startswith(prefix + BODY_SEPARATOR):
        return content[len(prefix) + len(BODY_SEPARATOR):]
    return content


def language(metadata: Mapping[str, Any], content_dir: str = "content") -> str:
    """A page's language: its `lang` front matter, else a language directory under the content
    dir (`content/fr/...`), else Hugo's default."""
    declared = metadata.get("lang") or metadata.get("language")
    if isinstance(declared, str) and declared.strip():
        return declared.strip().lower()
    parts = str(metadata.get("file_path", "")).split("/")
    if content_dir in parts:
        parts = parts[parts.index(content_dir) + 1:]
    if len(parts) > 1 and _LANGUAGE.match(parts[0].lower()):
        return parts[0].lower()
    return DEFAULT_LANGUAGE


def full_link(url: str, lang: str, base_urls: Mapping[str, str]) -> str:
    """A page's address to open: its site-relative `url` (which holds the baseURL's path, as
    Hugo's relative permalink does) on the scheme and host of the baseURL its language is
    published under (`hetriever.site.Site.absolute_base_urls`, recorded at ingest); the `url`
    itself when no such baseURL is known."""
    base = base_urls.get(lang) or base_urls.get("")
    if not base or not url.startswith("/") or url.startswith("//"):
        return url
    parts = urlsplit(base)
    return f"{parts.scheme}://{parts.netloc}{url}"


def recorded_base_urls(catalog: Any, repository: str,
                       site_urls: Mapping[str, str]) -> dict[str, str]:
    """Where a repository's site is published, as its last ingest recorded it (an index
    built before that was recorded has none: its results keep site-relative URLs), the
    site-wide one replaced by the repository's entry in `site_urls` (the setting)."""
    record = catalog.repository(repository)
    recorded = record.settings.get("base_urls") if record else None
    found = ({str(k): str(v) for k, v in recorded.items()} if isinstance(recorded, dict)
             else {})
    published = site_urls.get(repository, "")
    return {**found, "": published} if published else found


def base_urls_of(catalog: Any, matches: Iterable[SearchResult],
                 site_urls: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """`recorded_base_urls` of each repository the matches come from, read once each."""
    names = {str(m.metadata.get("repository", "")) for m in matches}
    return {name: recorded_base_urls(catalog, name, site_urls) for name in names}


def match_view(match: SearchResult, content_dir: str = "content",
               base_urls: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What the API returns for one match; `base_urls`: where its site is published."""
    meta = match.metadata
    lang = language(meta, content_dir)
    url = str(meta.get("url", ""))
    base_urls = base_urls or {}
    return {
        "page_id": page_id(meta),
        "chunk_id": match.doc_id,
        "title": meta.get("title", ""),
        "url": url,
        "link": full_link(url, lang, base_urls),
        "repository": meta.get("repository", ""),
        "file_path": meta.get("file_path", ""),
        "heading": meta.get("heading_context", ""),
        "section": meta.get("section", ""),
        "lang": lang,
        "translations": [{**t, "link": full_link(str(t.get("url", "")), str(t.get("lang", "")),
                                                 base_urls)} for t in match.translations],
        "passage": passage(match.content, meta),
        "score": round(float(match.score), 6),
        "source": match.source,
        "dense_score": None if match.dense_score is None else round(match.dense_score, 6),
        "bm25_score": None if match.bm25_score is None else round(match.bm25_score, 6),
        # a page result's next best passages
        "more": [{"chunk_id": p["doc_id"], "heading": p.get("heading_context", ""),
                  "passage": passage(p["content"], {**meta, "page_record": False,
                                                    "heading_context": p.get("heading_context")})}
                 for p in match.passages],
    }
