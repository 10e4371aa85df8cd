"""Page records: one searchable unit per page made of what its front matter says it is for.

A page record holds the title, then the linkTitle (when it differs), description, summary,
keywords and the section path the URL shows. It is found by what the author wrote the page
for, and section pages whose body is empty are pages too. Body chunks come from
`hetriever.chunk`; the record shares their metadata and id scheme (`chunk_index` -1).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from hetriever.chunk.chunker import CONTEXT_SEPARATOR, chunk_id
from hetriever.chunk.metadata import page_metadata
from hetriever.chunk.tokenizer import TokenCounter
from hetriever.core.models import Chunk, Metadata
from hetriever.parse.parsed_page import Page


def _folded(text: str) -> str:
    return " ".join(text.split()).casefold()


PAGE_RECORD_OCCURRENCE = -1  # keeps a page record's id apart from any body chunk's


def page_summary_lines(page: Page) -> list[str]:
    """What a page says about itself in front matter, one line each, for its page record.

    The linkTitle (when it is not the title), description, summary and keywords, then the
    section path the URL shows ("functions > collections"). Authors write these to say what the
    page is for, and section pages often have nothing else.
    """
    fm = page.front_matter
    lines: list[str] = []
    link_title = fm.get("linkTitle")
    if isinstance(link_title, str) and _folded(link_title) != _folded(page.title):
        lines.append(link_title.strip())
    for key in ("description", "summary"):
        value = fm.get(key)
        if isinstance(value, str) and value.strip():
            lines.append(value.strip())
    keywords = fm.get("keywords")
    if isinstance(keywords, list) and keywords:
        lines.append(", ".join(str(k) for k in keywords))
    segments = [s for s in page.url.strip("/").split("/") if s and "://" not in s]
    if len(segments) > 1:
        lines.append(CONTEXT_SEPARATOR.join(s.replace("-", " ") for s in segments[:-1]))
    return lines


def has_page_record(page: Page) -> bool:
    """A page with a title or description of its own is a page, even with an empty body."""
    fm = page.front_matter
    return any(
        isinstance(fm.get(k), str) and str(fm.get(k)).strip()
        for k in ("title", "linkTitle", "description")
    )


def page_record(
    page: Page,
    *,
    counter: TokenCounter,
    max_tokens: int = 254,
    extra_metadata: Mapping | None = None,
) -> Chunk | None:
    """One searchable unit for the page as a whole: its title, then `page_summary_lines`.

    Its metadata is the page's, with `page_record: True` and `chunk_index` -1 (it comes before
    the body's chunks); its text is cut at a word boundary to the token budget.
    """
    if not has_page_record(page):
        return None
    budget = min(max_tokens, counter.max_tokens)
    text = "\n".join([page.title.strip(), *page_summary_lines(page)]).strip()
    if counter.count(text) > budget:
        words = text.split(" ")
        low, high = 1, len(words)  # the longest prefix of words that fits
        while low < high:
            mid = (low + high + 1) // 2
            if counter.count(" ".join(words[:mid])) <= budget:
                low = mid
            else:
                high = mid - 1
        text = " ".join(words[:low])
    metadata: Metadata = {
        **page_metadata(page, extra_metadata),
        "heading_context": "",
        "chunk_index": -1,
        "has_code": False,
        "page_record": True,
        "content_hash": hashlib.sha256(text.encode("utf-8")).hexdigest(),
    }
    return Chunk(
        chunk_id(page.repository, page.file_path, text, PAGE_RECORD_OCCURRENCE), text, metadata
    )


def display_chunk(chunks: Sequence[Chunk]) -> Chunk:
    """The chunk that stands for a page (exact title hits): its first body chunk, or its page
    record when the page has no body."""
    return next((c for c in chunks if not c.metadata.get("page_record")), chunks[0])
