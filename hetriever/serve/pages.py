"""Search matches as the served API shows them: page ids, passages, languages and links.

A page is one (repository, file_path); its id is `<repository>/<file_path>` (repository names
have no `/`, so the first one splits it). Search groups results by page itself; these are pure
functions over `SearchResult`s so the HTTP API and the MCP server answer alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from hetriever.chunk.sections import ANCHORS_KEY, heading_anchor
from hetriever.core.models import SearchResult
from hetriever.search.published import full_link, language

CONTEXT_SEPARATOR = " > "  # as hetriever.chunk joins a chunk's title and headings
BODY_SEPARATOR = "\n\n"
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
        return content[len(title) + 1 :]
    prefix = CONTEXT_SEPARATOR.join(
        p
        for p in (str(metadata.get("title") or ""), str(metadata.get("heading_context") or ""))
        if p.strip()
    )
    if prefix and content.startswith(prefix + BODY_SEPARATOR):
        return content[len(prefix) + len(BODY_SEPARATOR) :]
    return content


def section_anchor(metadata: Mapping[str, Any]) -> str:
    """The anchor of the section a chunk is in, "" for a page's top: the id its author gave
    the section that starts at this chunk (`anchors`), else the id Hugo gives its heading.
    A heading a page repeats gets Hugo's `-1`, `-2`... only from the page itself: this
    links to the first one."""
    given = metadata.get(ANCHORS_KEY)
    if isinstance(given, list) and given and not metadata.get("merged_headings"):
        return str(given[-1])
    headings = str(metadata.get("heading_context") or "").split(CONTEXT_SEPARATOR)
    return heading_anchor(headings[-1]) if headings[-1].strip() else ""


def match_view(
    match: SearchResult, content_dir: str = "content", base_urls: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """What the API returns for one match; `base_urls`: where its site is published."""
    meta = match.metadata
    lang = language(meta, content_dir)
    url = str(meta.get("url", ""))
    base_urls = base_urls or {}
    link = full_link(url, lang, base_urls)
    anchor = section_anchor(meta)
    return {
        "page_id": page_id(meta),
        "chunk_id": match.doc_id,
        "title": meta.get("title", ""),
        "url": url,
        "link": link,
        "repository": meta.get("repository", ""),
        "file_path": meta.get("file_path", ""),
        "heading": meta.get("heading_context", ""),
        "anchor": anchor,
        # the page at the passage's section
        "heading_link": f"{link}#{anchor}" if anchor else link,
        "section": meta.get("section", ""),
        "lang": lang,
        "translations": [
            {**t, "link": full_link(str(t.get("url", "")), str(t.get("lang", "")), base_urls)}
            for t in match.translations
        ],
        "passage": passage(match.content, meta),
        "version": match.version,
        **({"versions": match.versions} if match.versions else {}),
        "score": round(float(match.score), 6),
        "source": match.source,
        "dense_score": None if match.dense_score is None else round(match.dense_score, 6),
        "bm25_score": None if match.bm25_score is None else round(match.bm25_score, 6),
        # a page result's next best passages
        "more": [
            {
                "chunk_id": p["doc_id"],
                "heading": p.get("heading_context", ""),
                "passage": passage(
                    p["content"],
                    {**meta, "page_record": False, "heading_context": p.get("heading_context")},
                ),
            }
            for p in match.passages
        ],
    }
