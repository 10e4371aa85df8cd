"""The in-memory side of the BM25 index: postings in CSR segments, tombstones, compaction,
the equality index filters use, and Okapi scoring with a deterministic top k (each chunk's
metadata is held column by column: `hetriever.store.bm25.metadata`). `hetriever.store.bm25.bm25_index`
loads it from SQLite (`_State.from_rows`) and keeps it in step with other writers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from hetriever.core.malloc import release_free_memory
from hetriever.store.bm25.metadata import ChunkMetadata
from hetriever.store.filters import equality_terms, matches, only_equalities

_EMPTY_I = np.zeros(0, dtype=np.int32)
_EMPTY_F = np.zeros(0, dtype=np.float32)


SORT_BLOCK = 1 << 18  # postings ordered at a time: bounds the sort's int64 order and indices


class _Segment:
    """Postings in CSR form: term id t -> docs[offsets[t]:offsets[t+1]] with their tfs."""

    def __init__(
        self,
        term_ids: np.ndarray,
        docs: np.ndarray | None,
        tfs: np.ndarray,
        n_terms: int,
        doc_ends: np.ndarray | None = None,
    ):
        """Postings (term, doc, tf) ordered by term, stably: within a term they keep their
        input order. The docs are given, or found from `doc_ends` (postings stored doc by doc,
        each doc's end offset), which spares a loading index an array as long as the postings.
        Ordered a block at a time into the final arrays: sorting all postings at once held an
        int64 order and copies of every input (a 100k-chunk index peaked ~40 MB higher)."""
        n = len(term_ids)
        counts = np.bincount(term_ids, minlength=n_terms) if n else np.zeros(n_terms, np.int64)
        self.offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=self.offsets[1:])
        self.docs = np.empty(n, dtype=np.int32)
        self.tfs = np.empty(n, dtype=np.float32)
        cursor = self.offsets[:-1].copy()  # where each term's next postings go
        small = len(counts) <= 65536
        for start in range(0, n, SORT_BLOCK):
            block = term_ids[start : start + SORT_BLOCK]
            # numpy radix-sorts 16-bit keys: ~2x faster
            order = np.argsort(block.astype(np.uint16) if small else block, kind="stable")
            terms = block[order]
            in_block = np.bincount(block, minlength=len(counts))
            first = np.cumsum(in_block) - in_block  # each term's first place in the sorted block
            dest = cursor[terms] + (np.arange(len(block)) - first[terms])
            if docs is not None:
                self.docs[dest] = docs[start : start + SORT_BLOCK][order]
            else:
                assert doc_ends is not None
                self.docs[dest] = np.searchsorted(doc_ends, start + order, side="right")
            self.tfs[dest] = tfs[start : start + SORT_BLOCK][order]
            cursor += in_block

    def __len__(self) -> int:
        return len(self.docs)

    def postings(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        if term + 1 >= len(self.offsets):
            return _EMPTY_I, _EMPTY_F
        start, end = self.offsets[term], self.offsets[term + 1]
        return self.docs[start:end], self.tfs[start:end]

    def triples(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        terms = np.repeat(np.arange(len(self.offsets) - 1, dtype=np.int32), np.diff(self.offsets))
        return terms, self.docs, self.tfs


def _value_key(value: Any) -> tuple | None:
    """Key for the equality index, following filters' equality (2 == 2.0, bools apart)."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, (int, float)):
        return ("n", float(value))
    if isinstance(value, str):
        return ("s", value)
    return None  # lists never equal a scalar


def equality_matcher(where: dict | None) -> Callable[[Mapping], bool]:
    """For a filter of `$eq`/`$in` only (`only_equalities`): a test by sets of value keys that
    answers as `matches` does, instead of comparing a value with each listed one in turn."""
    terms = [
        (key, {k for v in values if (k := _value_key(v)) is not None})
        for key, values in equality_terms(where) or []
    ]
    return lambda meta: all(_value_key(meta.get(key)) in keys for key, keys in terms)


FILTER_CACHE_SIZE = 32  # filters remembered per generation (each cache)


def _cached(cache: dict, key: Any, compute: Callable[[], Any]) -> Any:
    """`cache[key]`, computed on a miss; the oldest entry goes once the cache is full."""
    if key not in cache:
        value = compute()
        if len(cache) >= FILTER_CACHE_SIZE:
            cache.pop(next(iter(cache)))
        cache[key] = value
    return cache[key]


class _State:
    """The committed index of one generation, in memory. Doc slots are append-only until
    compaction; a replaced or deleted doc's slot is tombstoned."""

    def __init__(
        self,
        generation: int,
        doc_ids: list[str],
        lengths: np.ndarray,
        metas: ChunkMetadata,
        term_ids: np.ndarray,
        docs: np.ndarray | None,
        tfs: np.ndarray,
        n_terms: int,
        doc_ends: np.ndarray | None = None,
    ):
        self.generation = generation
        self.doc_ids = doc_ids
        self.metas = metas
        self.id_to_slot = {doc_id: i for i, doc_id in enumerate(doc_ids)}
        self.lengths = np.array(lengths, dtype=np.float64)
        self.alive = np.ones(len(doc_ids), dtype=bool)
        self.dead = 0
        self.total_len = float(self.lengths.sum())
        self.main = _Segment(term_ids, docs, tfs, n_terms, doc_ends)
        self.delta_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.delta_postings = 0
        self._delta: _Segment | None = None
        self._norm: np.ndarray | None = None
        self._norm_params: tuple[float, float] | None = None
        self.eq_index: dict[str, dict[tuple, set[int]]] = {}
        self._masks: dict[str, np.ndarray | None] = {}  # filter -> allowed slots, per state
        self._ids: dict[tuple[str, int], list[str] | None] = {}  # (filter, limit) -> few_ids
        self._new_lengths: list[float] = []

    @classmethod
    def from_rows(cls, generation: int, rows: Iterable[tuple], n_terms: int) -> _State:
        """The index of (id, length, metadata JSON, term ids, tfs) rows, as stored in SQLite.
        Streamed row by row: holding every row's JSON at once cost more than the index."""
        doc_ids: list[str] = []
        lengths: list[int] = []
        metas = ChunkMetadata()
        term_bytes, tf_bytes = bytearray(), bytearray()  # no list of 100k small objects
        per_doc: list[int] = []
        for doc_id, length, meta, terms, tf in rows:
            doc_ids.append(doc_id)
            lengths.append(length)
            metas.append(json.loads(meta))
            term_bytes += terms
            tf_bytes += tf
            per_doc.append(len(tf) // 2)
        term_ids = np.frombuffer(term_bytes, dtype="<i4")
        tfs = np.frombuffer(tf_bytes, dtype="<u2")  # made float32 as the segment orders them
        doc_ends = np.cumsum(np.asarray(per_doc, dtype=np.int64))
        del per_doc
        release_free_memory()  # the rows' decoding temporaries, before the postings are ordered
        return cls(
            generation,
            doc_ids,
            np.asarray(lengths, dtype=np.float64),
            metas,
            term_ids,
            None,
            tfs,
            n_terms,
            doc_ends,
        )

    def replay(self, doc_ids: Sequence[str], rows: Iterable[tuple]) -> None:
        """Catch up with writes to `doc_ids`: their stored rows now (an id with no row was
        deleted), in the `from_rows` layout."""
        found = {row[0]: row for row in rows}
        for doc_id in doc_ids:
            row = found.get(doc_id)
            if row is None:
                self.remove(doc_id)
            else:
                self.add(
                    doc_id,
                    row[1],
                    json.loads(row[2]),
                    np.frombuffer(row[3], dtype="<i4"),
                    np.frombuffer(row[4], dtype="<u2").astype(np.float32),
                )

    @property
    def n_live(self) -> int:
        return len(self.doc_ids) - self.dead

    def delta(self, n_terms: int) -> _Segment | None:
        if not self.delta_parts:
            return None
        if self._delta is None:
            terms, docs, tfs = (np.concatenate(x) for x in zip(*self.delta_parts))
            self._delta = _Segment(terms, docs, tfs, n_terms)
        return self._delta

    def norm(self, k1: float, b: float) -> np.ndarray:
        """k1 * (1 - b + b * len / avgdl) per slot, cached until the next change."""
        if self._norm is None or self._norm_params != (k1, b):
            avgdl = self.total_len / self.n_live if self.n_live and self.total_len else 1.0
            self._norm = k1 * (1.0 - b + b * self.lengths / avgdl)
            self._norm_params = (k1, b)
        return self._norm

    def remove(self, doc_id: str) -> None:
        slot = self.id_to_slot.pop(doc_id, None)
        if slot is None:
            return
        self.alive[slot] = False
        self.dead += 1
        self.total_len -= self.lengths[slot]
        for key, values in self.eq_index.items():
            vkey = _value_key(self.metas[slot].get(key))
            if vkey is not None and vkey in values:
                values[vkey].discard(slot)

    def add(self, doc_id: str, length: int, meta: dict, terms: np.ndarray, tfs: np.ndarray) -> None:
        self.remove(doc_id)
        slot = len(self.doc_ids)
        self.doc_ids.append(doc_id)
        self.metas.append(meta)
        self.id_to_slot[doc_id] = slot
        self._new_lengths.append(float(length))  # arrays grow once per batch, in changed()
        self.total_len += length
        self.delta_parts.append((terms, np.full(len(terms), slot, dtype=np.int32), tfs))
        self.delta_postings += len(terms)
        for key, values in self.eq_index.items():
            vkey = _value_key(meta.get(key))
            if vkey is not None:
                values.setdefault(vkey, set()).add(slot)

    def changed(self, n_terms: int) -> None:
        """Invalidate caches after adds/removes; compact when garbage or the delta grows."""
        if self._new_lengths:
            self.lengths = np.concatenate([self.lengths, self._new_lengths])
            self.alive = np.concatenate([self.alive, np.ones(len(self._new_lengths), dtype=bool)])
            self._new_lengths = []
        self._delta = None
        self._norm = None
        self._masks = {}
        self._ids = {}
        if self.dead > max(1000, len(self.doc_ids) // 4) or self.delta_postings > max(
            50_000, len(self.main) // 4
        ):
            self.compact(n_terms)

    def compact(self, n_terms: int) -> None:
        parts = [self.main.triples(), *self.delta_parts]
        terms, docs, tfs = (np.concatenate(x) for x in zip(*parts))
        keep = self.alive[docs]
        remap = np.cumsum(self.alive) - 1
        self.main = _Segment(terms[keep], remap[docs[keep]].astype(np.int32), tfs[keep], n_terms)
        live = np.flatnonzero(self.alive)
        self.doc_ids = [self.doc_ids[i] for i in live]
        self.metas = self.metas.take(int(i) for i in live)
        self.lengths = self.lengths[live]
        self.alive = np.ones(len(live), dtype=bool)
        self.id_to_slot = {doc_id: i for i, doc_id in enumerate(self.doc_ids)}
        self.dead = 0
        self.delta_parts, self.delta_postings, self._delta, self._norm = [], 0, None, None
        self.eq_index = {}
        self._masks = {}
        self._ids = {}

    def allowed_mask(self, where: dict) -> np.ndarray | None:
        """`slots_for(where)` as a boolean array over slots, cached until the next change."""

        def compute() -> np.ndarray | None:
            slots = self.slots_for(where)
            if slots is None:
                return None
            mask = np.zeros(len(self.doc_ids), dtype=bool)
            mask[np.fromiter(slots, dtype=np.int64, count=len(slots))] = True
            return mask

        return _cached(self._masks, json.dumps(where, sort_keys=True), compute)

    def few_ids(self, where: dict, limit: int) -> list[str] | None:
        """Ids of the live docs matching `where`, or None when its equality constraints leave
        more than `limit` candidates (or give none). Cached until the next change."""

        def compute() -> list[str] | None:
            mask = self.allowed_mask(where)
            if mask is None:
                return None
            allowed = np.flatnonzero(mask & self.alive)
            if len(allowed) > limit:
                return None
            return [self.doc_ids[s] for s in self._checked(where, [int(s) for s in allowed])]

        return _cached(self._ids, (json.dumps(where, sort_keys=True), limit), compute)

    def ids_matching(self, where: dict | None) -> set[str]:
        """Ids of the live docs matching `where`: narrowed by the equality index where the
        filter has equalities, then checked row by row only for what the index leaves open."""
        narrowed = self.slots_for(where)
        if narrowed is None:
            slots = [
                int(s) for s in np.flatnonzero(self.alive) if matches(where, self.metas[int(s)])
            ]
        else:
            slots = self._checked(where, [s for s in narrowed if self.alive[s]])
        return {self.doc_ids[s] for s in slots}

    def _checked(self, where: dict | None, slots: list[int]) -> list[int]:
        """`slots` (narrowed by `where`'s equalities) that match all of it: a filter of
        `$eq`/`$in` only needs no per-row check, which under `$in` compares each row with
        every listed value in turn."""
        if only_equalities(where):
            return slots
        return [s for s in slots if matches(where, self.metas[s])]  # e.g. a `$ne` as well

    def file_counts(self) -> dict[str, int]:
        """file_path -> live chunks, soft-deleted ones left out: one pass over two columns."""
        paths, deleted = self.metas.column("file_path"), self.metas.column("is_deleted")
        counts: dict[str, int] = {}
        for slot in np.flatnonzero(self.alive).tolist():
            path = paths[slot]
            if type(path) is str and deleted[slot] is not True:
                counts[path] = counts.get(path, 0) + 1
        return counts

    def slots_for(self, where: dict | None) -> set[int] | None:
        """Slots that can match `where` by its equality constraints (None: no narrowing)."""
        terms = equality_terms(where)
        if not terms:
            return None
        result: set[int] | None = None
        for key, values in terms:
            index = self.eq_index.get(key)
            if index is None:
                index = self.eq_index[key] = {}
                for slot in np.flatnonzero(self.alive).tolist():
                    vkey = _value_key(self.metas[slot].get(key))
                    if vkey is not None:
                        index.setdefault(vkey, set()).add(int(slot))
            found: set[int] = set()
            for value in values:
                vkey = _value_key(value)
                if vkey is not None:
                    found |= index.get(vkey, set())
            result = found if result is None else result & found
        return result

    # -- scoring --

    def scores(
        self,
        term_ids: list[int],
        n_terms: int,
        k1: float,
        b: float,
        idfs: Mapping[int, float] | None = None,
    ) -> np.ndarray:
        """Okapi BM25 of every slot for the query's term ids (0 where no term matches);
        `idfs` (term id -> idf) replaces this index's own idf, e.g. one over several sites."""
        scores = np.zeros(len(self.doc_ids), dtype=np.float64)
        norm = self.norm(k1, b)
        for term in term_ids:
            docs, tfs = self.live_postings(term, n_terms)
            if not len(docs):
                continue
            idf = idfs[term] if idfs is not None and term in idfs else self.idf_of(len(docs))
            # A live doc appears at most once per term, so plain fancy-index += is exact.
            scores[docs] += idf * tfs * (k1 + 1.0) / (tfs + norm[docs])
        return scores

    def live_postings(self, term: int, n_terms: int) -> tuple[np.ndarray, np.ndarray]:
        """(slots, tfs) of the live docs holding `term`, main and delta segments together."""
        docs, tfs = self.main.postings(term)
        delta = self.delta(n_terms)
        if delta is not None:
            more_docs, more_tfs = delta.postings(term)
            if len(more_docs):
                docs = np.concatenate([docs, more_docs])
                tfs = np.concatenate([tfs, more_tfs])
        if self.dead and len(docs):
            keep = self.alive[docs]
            docs, tfs = docs[keep], tfs[keep]
        return docs, tfs

    def idf_of(self, df: int) -> float:
        return math.log(1.0 + (self.n_live - df + 0.5) / (df + 0.5))

    def term_idf(self, term: int | None, n_terms: int) -> float:
        """The idf of a term id over the live docs (0.0 for a term the index does not hold)."""
        if term is None:
            return 0.0
        return self.idf_of(len(self.live_postings(term, n_terms)[0]))

    def search(
        self,
        term_ids: list[int],
        n_terms: int,
        k1: float,
        b: float,
        k: int,
        where: dict | None,
        idfs: Mapping[int, float] | None = None,
    ) -> tuple[list[int], np.ndarray]:
        """The best `k` slots matching `where` (a normalised filter) with a score > 0, and
        every slot's score."""
        scores = self.scores(term_ids, n_terms, k1, b, idfs)
        candidates = np.flatnonzero(scores > 0)
        if where is not None:
            allowed = self.allowed_mask(where)
            if allowed is not None:
                candidates = candidates[allowed[candidates]]
                if only_equalities(where):  # the mask is the whole filter: no row to check
                    where = None
        return self.top(scores, candidates, k, where), scores

    def top(
        self, scores: np.ndarray, candidates: np.ndarray, k: int, where: dict | None
    ) -> list[int]:
        """Best-first slots: partial sort, then run the filter only as far as needed."""
        if not len(candidates):
            return []
        first = k if where is None else 4 * k + 64
        if len(candidates) > first:
            # Everything scoring at least the first-th best: ties at the cut all come along,
            # so which of them wins is decided by id below, not by where they were stored.
            cut = np.partition(-scores[candidates], first - 1)[first - 1]
            keep = -scores[candidates] <= cut
            head, rest = candidates[keep], candidates[~keep]
        else:
            head, rest = candidates, candidates[:0]
        head = self.by_score_then_id(scores, head)
        if where is None:
            return [int(s) for s in head[:k]]
        out = [int(s) for s in head if matches(where, self.metas[s])][:k]
        if len(out) < k and len(rest):
            rest = self.by_score_then_id(scores, rest)
            for s in rest:
                if matches(where, self.metas[s]):
                    out.append(int(s))
                    if len(out) == k:
                        break
        return out

    def by_score_then_id(self, scores: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """Slots best first; equal scores in id order (insertion order differs between an
        index built fresh and one updated incrementally, ids do not)."""
        ids = np.array([self.doc_ids[s] for s in slots], dtype=str)
        return slots[np.lexsort((ids, -scores[slots]))]
