"""Heading-aware chunking of a cleaned page to the embedding model's token budget.

A page's blocks are cut into sections at headings; each section's paragraphs and code blocks
are packed in order into chunks of at most `max_tokens` word-pieces, counting the whole chunk
text `"{title} > {heading context}\\n\\n{body}"`, so the model never truncates what it embeds.

Counting is done once per block, in one batch per page. With a whitespace-splitting tokenizer
(MiniLM's BERT word-pieces) the count of texts joined by whitespace is exactly the sum of their
counts, so packed chunks need no second tokenisation; other tokenizers get a separator
allowance and a final check of every chunk.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hetriever.chunk.bounds import (
    MAX_CHUNK_CHARS,
    MAX_HEADING_CHARS,
    MAX_UNIT_CHARS,
    count_in_slices,
    cut_text,
)
from hetriever.chunk.metadata import page_metadata
from hetriever.chunk.tokenizer import TokenCounter, word_boundary
from hetriever.core.budget import check as check_budget
from hetriever.core.logs import get_logger
from hetriever.core.models import Block, Chunk, Metadata
from hetriever.parse.parsed_page import Page

log = get_logger(__name__)

BODY_SEPARATOR = "\n\n"
CONTEXT_SEPARATOR = " > "
ID_HEX_CHARS = 32

# A fence opening line: optional indentation, then ``` or ~~~ (3 or more), then an info string.
_FENCE = re.compile(r"^([ \t]*)(`{3,}|~{3,})")
# Sentence ends (., !, ? followed by space) and line breaks (flattened list items, table rows).
_SENTENCE_BOUNDARY = re.compile(r"(?<=[.!?])\s+|\s*\n\s*")


def chunk_id(repository: str, file_path: str, text: str, occurrence: int = 0) -> str:
    """Deterministic id of a chunk: sha256 of its file, text and occurrence, hex.

    The first 32 hex digits (128 bits) are kept: even at 10^9 chunks in one collection the
    chance of any collision is about 10^18 / 2^129, i.e. 10^-21. `occurrence` numbers chunks of
    one file with identical text, so ids are unique within a file; position plays no part, so
    an edited file's unchanged chunks keep their ids (and their embeddings).
    """
    raw = "\x1f".join((repository, file_path, text, str(occurrence)))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:ID_HEX_CHARS]


@dataclass
class _Unit:
    """A block (or a piece of one) that is never cut while packing."""

    text: str
    tokens: int  # an upper bound of the word-pieces of `text` alone
    is_code: bool


@dataclass
class _Section:
    context: tuple[str, ...]  # heading path above the section's text
    units: list[_Unit] = field(default_factory=list)


@dataclass
class _Piece:
    """A chunk being built: its heading path and body parts."""

    context: tuple[str, ...]
    parts: list[str]
    tokens: int  # body tokens, separators included
    has_code: bool
    merged: list[str] = field(default_factory=list)  # headings of sections folded into the body

    @property
    def chars(self) -> int:
        return sum(len(p) for p in self.parts) + len(BODY_SEPARATOR) * (len(self.parts) - 1)


class _Chunker:
    def __init__(self, page: Page, counter: TokenCounter, budget: int, min_tokens: int) -> None:
        self.page = page
        self.counter = counter
        self.budget = budget
        self.min_tokens = min_tokens
        # Whitespace between parts costs nothing with a whitespace-splitting tokenizer.
        self.join = 0 if counter.additive else 2
        self.prefix: dict[tuple[str, ...], str] = {}
        self.body_limit: dict[tuple[str, ...], int] = {}
        self.heading_tokens: dict[str, int] = {}
        self.gt_tokens = 1

    # --- sections -------------------------------------------------------------------------

    def sections(self, blocks: Sequence[Block]) -> list[_Section]:
        title_key = _norm(self.page.title)
        stack: list[tuple[int, str]] = []
        sections = [_Section(())]
        headings_only: list[str] = []
        for block in blocks:
            if block.kind == "heading":
                text = " ".join(block.text.split())[:MAX_HEADING_CHARS]
                if not text:
                    continue
                level = block.level if block.level > 0 else 1
                while stack and stack[-1][0] >= level:
                    stack.pop()
                # The page's own top heading repeats the title already in every chunk's prefix.
                if stack or _norm(text) != title_key:
                    stack.append((level, text))
                    headings_only.append(text)
                sections.append(_Section(tuple(h for _, h in stack)))
            elif block.kind == "code":
                text = block.text.strip("\n")
                if text.strip():
                    sections[-1].units.extend(
                        _Unit(t, 0, True) for t in cut_text(text, MAX_UNIT_CHARS, lines=True)
                    )
            else:
                text = block.text.strip()
                if text:
                    sections[-1].units.extend(
                        _Unit(t, 0, False) for t in cut_text(text, MAX_UNIT_CHARS, lines=False)
                    )
        # A heading with nothing under it (trailing, or followed only by removed markup) would
        # vanish with its empty section unless a later section carries it in its context:
        # keep its text as a line of the section before it.
        later: set[str] = set()
        for i in range(len(sections) - 1, 0, -1):
            section = sections[i]
            if not section.units and section.context and section.context[-1] not in later:
                sections[i - 1].units.append(_Unit(section.context[-1], 0, False))
            later.update(section.context)
        sections = [s for s in sections if s.units]
        if not sections and headings_only:
            # A page of headings alone still has text worth finding.
            sections = [_Section((), [_Unit("\n".join(headings_only), 0, False)])]
        return sections

    # --- counting -------------------------------------------------------------------------

    def measure(self, sections: list[_Section]) -> None:
        """Count every unit, prefix and heading in one batch; set each section's body limit."""
        contexts = list(dict.fromkeys(s.context for s in sections))
        headings = list(dict.fromkeys(h for c in contexts for h in c))
        prefixes = [_prefix(self.page.title, c) for c in contexts]
        units = [u for s in sections for u in s.units]
        counts = count_in_slices(
            self.counter.count_batch,
            [u.text for u in units] + prefixes + headings + [CONTEXT_SEPARATOR.strip()],
        )
        for unit, n in zip(units, counts):
            unit.tokens = n
        offset = len(units)
        cap = self.budget // 2
        for context, prefix, n in zip(contexts, prefixes, counts[offset:]):
            if n > cap or len(prefix) > MAX_CHUNK_CHARS // 4:
                # A runaway heading path may not starve the body: keep its start only.
                prefix = self.counter.truncate(prefix[: MAX_CHUNK_CHARS // 4], cap)
                n = self.counter.count(prefix)
            self.prefix[context] = prefix
            self.body_limit[context] = self.budget - n - (self.join if prefix else 0)
        offset += len(contexts)
        self.heading_tokens = dict(zip(headings, counts[offset : offset + len(headings)]))
        self.gt_tokens = counts[-1]

    # --- splitting units that alone exceed the budget --------------------------------------

    def split_oversize(self, sections: list[_Section]) -> None:
        for section in sections:
            limit = self.body_limit[section.context]
            if all(u.tokens <= limit and len(u.text) <= MAX_CHUNK_CHARS for u in section.units):
                continue
            check_budget()
            units: list[_Unit] = []
            for unit in section.units:
                if unit.tokens <= limit and len(unit.text) <= MAX_CHUNK_CHARS:
                    units.append(unit)
                    continue
                if unit.tokens <= limit:
                    split = [unit]
                elif unit.is_code:
                    split = self._split_code(unit.text, limit)
                else:
                    split = self._split_paragraph(unit.text, limit)
                units.extend(self._cut_long(split))
            section.units = units

    def _cut_long(self, units: list[_Unit]) -> list[_Unit]:
        """Units over `MAX_CHUNK_CHARS` (words the tokenizer makes one `[UNK]` of) cut by
        characters, each piece counted on its own."""
        if all(len(u.text) <= MAX_CHUNK_CHARS for u in units):
            return units
        out: list[_Unit] = []
        for unit in units:
            if len(unit.text) <= MAX_CHUNK_CHARS:
                out.append(unit)
                continue
            pieces = cut_text(unit.text, MAX_CHUNK_CHARS, lines=unit.is_code)
            counts = self.counter.count_batch(pieces)
            out.extend(_Unit(p, n, unit.is_code) for p, n in zip(pieces, counts))
        return out

    def _split_paragraph(self, text: str, limit: int) -> list[_Unit]:
        spans = _sentence_spans(text)
        if len(spans) < 2:
            return self._split_tokens(text, limit, is_code=False)
        counts = self.counter.count_batch([text[a:b] for a, b in spans])
        out: list[_Unit] = []
        group: list[int] = []  # indexes into spans
        total = 0

        def flush() -> None:
            if group:
                a, b = spans[group[0]][0], spans[group[-1]][1]
                out.append(_Unit(text[a:b], total, False))

        for i, n in enumerate(counts):
            if n > limit:
                flush()
                group, total = [], 0
                a, b = spans[i]
                out.extend(self._split_tokens(text[a:b], limit, is_code=False))
            elif group and total + self.join + n <= limit:
                group.append(i)
                total += self.join + n
            else:
                flush()
                group, total = [i], n
        flush()
        return out

    def _split_tokens(self, text: str, limit: int, *, is_code: bool) -> list[_Unit]:
        """Cut `text` into pieces of at most `limit` word-pieces, at word starts where possible."""
        enc = self.counter.encode(text)
        offsets, words, n = enc.offsets, enc.word_ids, len(enc.ids)
        out: list[_Unit] = []
        unbounded: list[int] = []  # pieces that start inside a word: their count is unknown
        start = 0
        while start < n:
            end = n if n - start <= limit else word_boundary(words, start + limit, low=start)
            piece = text[offsets[start][0] : offsets[end][0] if end < n else len(text)].strip()
            starts_mid_word = (
                start > 0 and words[start] is not None and words[start] == words[start - 1]
            )
            if piece:
                if starts_mid_word or not self.counter.additive:
                    unbounded.append(len(out))
                out.append(_Unit(piece, end - start, is_code))
            start = end
        if unbounded:
            # A piece cut out of a word re-tokenises differently; measure it on its own.
            counts = self.counter.count_batch([out[i].text for i in unbounded])
            for i, count in zip(unbounded, counts):
                out[i].tokens = count
            fixed: list[_Unit] = []
            for unit in out:
                if unit.tokens > limit and len(unit.text) < len(text):
                    fixed.extend(self._split_tokens(unit.text, limit, is_code=is_code))
                else:
                    fixed.append(unit)
            out = fixed
        return out

    def _split_code(self, text: str, limit: int) -> list[_Unit]:
        """Split a code block by lines; every piece is re-fenced with the original opening line."""
        lines = text.split("\n")
        match = _FENCE.match(lines[0])
        opening = closing = ""
        inner = lines
        if match:
            indent, fence = match.groups()
            opening = lines[0]
            if len(lines) > 1 and _closes(lines[-1], fence):
                closing, inner = lines[-1], lines[1:-1]
            else:
                closing, inner = indent + fence, lines[1:]
        counts = self.counter.count_batch([opening, closing] + inner)
        frame = counts[0] + counts[1] + (2 * self.join if opening else 0)
        line_limit = limit - frame
        if opening and line_limit < limit // 4:
            # An enormous info string: ship the body unfenced rather than not at all.
            opening = closing = ""
            line_limit = limit
            counts[0] = counts[1] = 0
        line_join = 0 if self.counter.additive else 1

        groups: list[tuple[list[str], int]] = []
        group: list[str] = []
        total = 0
        for line, n in zip(inner, counts[2:]):
            pieces = [(line, n)]
            if n > line_limit:
                pieces = [
                    (u.text, u.tokens) for u in self._split_tokens(line, line_limit, is_code=True)
                ]
            for piece, m in pieces:
                if group and total + line_join + m > line_limit:
                    groups.append((group, total))
                    group, total = [], 0
                total += (line_join if group else 0) + m
                group.append(piece)
        if group:
            groups.append((group, total))

        out: list[_Unit] = []
        for group, total in groups:
            if not any(line.strip() for line in group):
                continue
            body = "\n".join(group)
            if opening:
                out.append(_Unit(f"{opening}\n{body}\n{closing}", total + frame, True))
            else:
                out.append(_Unit(body, total, True))
        return out

    # --- packing --------------------------------------------------------------------------

    def pack(self, sections: list[_Section]) -> list[_Piece]:
        pieces: list[_Piece] = []
        for section in sections:
            limit = self.body_limit[section.context]
            current: _Piece | None = None
            for unit in section.units:
                if (
                    current is not None
                    and current.tokens + self.join + unit.tokens <= limit
                    and current.chars + len(BODY_SEPARATOR) + len(unit.text) <= MAX_CHUNK_CHARS
                ):
                    current.parts.append(unit.text)
                    current.tokens += self.join + unit.tokens
                    current.has_code = current.has_code or unit.is_code
                else:
                    current = _Piece(section.context, [unit.text], unit.tokens, unit.is_code)
                    pieces.append(current)
        return pieces

    def merge_short(self, pieces: list[_Piece]) -> list[_Piece]:
        """Fold fragments under `min_tokens` into a neighbour: same section first, then the next."""
        out: list[_Piece] = []
        i = 0
        while i < len(pieces):
            piece = pieces[i]
            following = pieces[i + 1] if i + 1 < len(pieces) else None
            if piece.tokens < self.min_tokens:
                before = out[-1] if out else None
                if before and before.context == piece.context and self._absorb(before, piece):
                    i += 1
                    continue
                if (
                    following
                    and following.context == piece.context
                    and self._absorb(piece, following)
                ):
                    pieces[i + 1] = piece
                    i += 1
                    continue
                if following and self._absorb(piece, following):
                    pieces[i + 1] = piece
                    i += 1
                    continue
                if before and self._absorb(before, piece):
                    i += 1
                    continue
            out.append(piece)
            i += 1
        return out

    def _absorb(self, first: _Piece, second: _Piece) -> bool:
        """Append `second` to `first` (keeping `first`'s context) if the result fits."""
        parts = list(second.parts)
        tokens = second.tokens
        new: tuple[str, ...] = ()
        if second.context != first.context:
            # The later part's own headings become a line of the body, so they are not lost.
            common = 0
            for a, b in zip(first.context, second.context):
                if a != b:
                    break
                common += 1
            new = second.context[common:]
            if new:
                parts.insert(0, CONTEXT_SEPARATOR.join(new))
                tokens += (
                    sum(self.heading_tokens.get(h, 0) for h in new)
                    + (len(new) - 1) * self.gt_tokens
                    + self.join
                )
        total = first.tokens + self.join + tokens
        if total > self.body_limit[first.context]:
            return False
        if first.chars + sum(len(p) + len(BODY_SEPARATOR) for p in parts) > MAX_CHUNK_CHARS:
            return False
        first.parts.extend(parts)
        first.tokens = total
        first.has_code = first.has_code or second.has_code
        first.merged.extend([*new, *second.merged])
        return True

    # --- final texts ----------------------------------------------------------------------

    def texts(self, pieces: list[_Piece]) -> list[tuple[_Piece, str]]:
        out = [(p, _join(self.prefix[p.context], BODY_SEPARATOR.join(p.parts))) for p in pieces]
        if self.counter.additive:
            return out  # sums are exact: see the module docstring
        checked: list[tuple[_Piece, str]] = []
        for (piece, text), n in zip(
            out, count_in_slices(self.counter.count_batch, [t for _, t in out])
        ):
            if n <= self.budget:
                checked.append((piece, text))
                continue
            log.warning(
                "chunk_over_budget",
                file_path=self.page.file_path,
                tokens=n,
                budget=self.budget,
                action="cut at token boundaries",
            )
            prefix = self.prefix[piece.context]
            rest = BODY_SEPARATOR.join(piece.parts)
            limit = self.body_limit[piece.context]
            while rest:
                head = self.counter.truncate(rest, limit)
                if not head or self.counter.count(_join(prefix, head)) > self.budget:
                    limit -= max(1, limit // 8)
                    if limit <= 0:
                        break
                    continue
                checked.append((piece, _join(prefix, head)))
                rest = rest[len(head) :].lstrip()
        return checked


def chunk_page(
    page: Page,
    blocks: list[Block],
    *,
    counter: TokenCounter,
    max_tokens: int = 254,
    min_tokens: int = 24,
    extra_metadata: Mapping | None = None,
) -> list[Chunk]:
    """Cut a cleaned page into chunks of at most `max_tokens` word-pieces each (whole text).

    Returns no chunks when the page has no text (the caller records "empty body"), else at
    least one. `extra_metadata` (e.g. access_level) is added to every chunk's metadata.
    """
    budget = min(max_tokens, counter.max_tokens)
    chunker = _Chunker(page, counter, budget, min_tokens)
    sections = chunker.sections(blocks)
    if not sections:
        return []
    check_budget()
    chunker.measure(sections)
    check_budget()
    chunker.split_oversize(sections)
    pieces = chunker.merge_short(chunker.pack(sections))
    check_budget()
    texts = chunker.texts(pieces)

    base = page_metadata(page, extra_metadata)
    chunks: list[Chunk] = []
    seen: dict[str, int] = {}
    for index, (piece, text) in enumerate(texts):
        occurrence = seen.get(text, 0)
        seen[text] = occurrence + 1
        metadata: Metadata = {
            **base,
            "heading_context": CONTEXT_SEPARATOR.join(piece.context),
            "chunk_index": index,
            "has_code": piece.has_code,
            "content_hash": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        }
        if piece.merged:  # a short section folded in keeps its heading as a key (catalog)
            metadata["merged_headings"] = list(dict.fromkeys(piece.merged))
        chunks.append(
            Chunk(chunk_id(page.repository, page.file_path, text, occurrence), text, metadata)
        )
    return chunks


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def _prefix(title: str, context: tuple[str, ...]) -> str:
    return CONTEXT_SEPARATOR.join(([title] if title.strip() else []) + list(context))


def _join(prefix: str, body: str) -> str:
    return f"{prefix}{BODY_SEPARATOR}{body}" if prefix else body


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= len(fence) and set(stripped) == {fence[0]}


def _sentence_spans(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    start = 0
    for match in _SENTENCE_BOUNDARY.finditer(text):
        if match.start() > start:
            spans.append((start, match.start()))
        start = match.end()
    if start < len(text):
        spans.append((start, len(text)))
    return spans
