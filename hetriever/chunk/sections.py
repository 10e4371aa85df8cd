"""A page's sections among its chunks: where each starts, and the anchor that links to it.

A section's anchor is the id Hugo gives its heading (`heading_anchor`), or the one its
author wrote (`## Settings {#settings-asciidoc}`: 210 headings of the two corpora, mostly to
tell apart headings a page repeats). Authors' ids are kept on the chunk where their section
starts (`ANCHORS_KEY`), so a pasted deep link shows that section.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from hetriever.chunk.chunker import CONTEXT_SEPARATOR
from hetriever.core.models import Block, Chunk

ANCHORS_KEY = "anchors"


def heading_anchor(heading: str) -> str:
    """The anchor Hugo gives a heading (`autoHeadingIDType` "github", its default): letters,
    digits and underscores lower-cased, spaces and hyphens as hyphens, the rest dropped."""
    return "".join(
        "-" if ch in " -" else ch.lower() for ch in heading.strip() if ch in " -_" or ch.isalnum()
    )


def section_starts(chunks: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, str]]:
    """(heading, chunk id) where each section of a page starts, from its chunks' (id,
    metadata) in page order: where a chunk's heading path (`heading_context`) differs from the
    chunk's before it at that heading's depth, and a short section the chunker folded into a
    neighbour (`merged_headings`) where that chunk is. A heading the page repeats starts a
    section each time.

    A short piece that took in the start of the next section (a page's one-line
    introduction and the first sentences of a long first section) lists that section's
    headings as merged; the chunk after it, which goes on with the same section, starts
    nothing new."""
    previous: tuple[str, ...] = ()
    merged: list[str] = []
    for chunk_id, metadata in chunks:
        context = str((metadata or {}).get("heading_context") or "")
        path = tuple(context.split(CONTEXT_SEPARATOR)) if context else ()
        depth = next((d for d in range(len(path)) if path[: d + 1] != previous[: d + 1]), len(path))
        new = list(path[depth:])
        if not (new and merged[-len(new) :] == new):
            for heading in new:
                yield heading, chunk_id
        previous = path
        value = (metadata or {}).get("merged_headings")
        merged = [str(h) for h in value] if isinstance(value, list) else []
        for heading in merged:
            yield heading, chunk_id


def keep_given_anchors(chunks: Sequence[Chunk], blocks: Sequence[Block]) -> None:
    """Put the ids authors gave headings (`blocks`, the cleaned page) on the chunks where
    those headings' sections start. The n-th section headed "Settings" is the page's n-th
    heading "Settings"."""
    given: dict[str, deque[str]] = {}
    for block in blocks:
        if block.kind == "heading":
            given.setdefault(" ".join(block.text.split()), deque()).append(block.anchor)
    if not any(anchor for queue in given.values() for anchor in queue):
        return
    found: dict[str, list[str]] = {}
    for heading, chunk_id in section_starts((c.id, c.metadata) for c in chunks):
        queue = given.get(heading)
        anchor = queue.popleft() if queue else ""
        if anchor:
            found.setdefault(chunk_id, []).append(anchor)
    for chunk in chunks:
        if chunk.id in found:
            chunk.metadata[ANCHORS_KEY] = found[chunk.id]


def anchored_sections(chunks: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, list[str]]:
    """anchor (case-folded) -> the chunk where each section so anchored starts, from a
    page's chunks' (id, metadata) in page order. An author's id comes before Hugo's."""
    starts: dict[str, list[str]] = {}
    for heading, chunk_id in section_starts(chunks):
        starts.setdefault(heading_anchor(heading), []).append(chunk_id)
    for chunk_id, metadata in chunks:
        anchors = metadata.get(ANCHORS_KEY)
        for anchor in anchors if isinstance(anchors, list) else ():
            key = str(anchor).casefold()
            starts[key] = [chunk_id, *(c for c in starts.get(key, ()) if c != chunk_id)]
    return starts
