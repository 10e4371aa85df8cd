"""Bounds on what one page may cost the chunker, whatever its text.

- No text the tokenizer sees is longer than `MAX_UNIT_CHARS`: a longer paragraph or code block
  is cut first (at a line break, else a space, else anywhere), so tokenizing holds at most one
  window's word-pieces (~0.5 KB each) however long the page's paragraph is; counting goes in
  slices of `COUNT_SLICE_CHARS`.
- No chunk is longer than `MAX_CHUNK_CHARS`: a word-piece budget alone does not bound it,
  since the tokenizer makes one `[UNK]` of a word of any length.
- A heading keeps `MAX_HEADING_CHARS`: it is repeated in every chunk's prefix and metadata.

Real pages stay far inside them (the shared corpora: longest chunk 2,215 characters), so their
chunks do not change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

MAX_UNIT_CHARS = 20_000
COUNT_SLICE_CHARS = 200_000
MAX_CHUNK_CHARS = 8_000
MAX_HEADING_CHARS = 4_000


def cut_text(text: str, limit: int, *, lines: bool) -> list[str]:
    """`text` in pieces of at most `limit` characters, cut at the last line break (`lines`)
    or whitespace in a piece's second half, else at `limit`. Pieces keep their text whole
    (`"".join` gives `text` back, but for whitespace stripped at the cuts)."""
    if len(text) <= limit:
        return [text]
    out: list[str] = []
    start = 0
    while len(text) - start > limit:
        end = start + limit
        cut = text.rfind("\n", start + limit // 2, end) if lines else -1
        if cut < 0:
            window = text[start + limit // 2 : end]
            spaces = [window.rfind(c) for c in " \t\n"]
            best = max(spaces)
            cut = start + limit // 2 + best if best >= 0 else end
        piece = text[start:cut].strip("\n" if lines else None)
        if piece.strip():
            out.append(piece)
        start = cut if cut > start else end
    rest = text[start:].strip("\n" if lines else None)
    if rest.strip():
        out.append(rest)
    return out


def count_in_slices(
    count_batch: Callable[[Sequence[str]], list[int]], texts: Sequence[str]
) -> list[int]:
    """`count_batch(texts)` in slices of at most `COUNT_SLICE_CHARS` characters (one text may
    exceed it alone), so the tokenizer never holds all of a page's word-pieces at once."""
    out: list[int] = []
    for batch in _slices(texts):
        out.extend(count_batch(batch))
    return out


def _slices(texts: Sequence[str]) -> Iterator[Sequence[str]]:
    start = size = 0
    for i, text in enumerate(texts):
        if i > start and size + len(text) > COUNT_SLICE_CHARS:
            yield texts[start:i]
            start, size = i, 0
        size += len(text)
    if start < len(texts):
        yield texts[start:]
