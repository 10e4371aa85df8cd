"""Why the default search misses real questions, and what each fix tried does per class.

    python -m bench.quality.bench_misses                 # both corpora
    python -m bench.quality.bench_misses --corpora hugo-docs

Every real question (bench/queries/real_questions.jsonl and questions.jsonl, both parts) is
searched as bench_quality.py searches it (its cached stores): the default search, and the dense
and BM25 lists 100 chunks deep. A miss is a question whose answer is not among the default's
first 3 pages. Each question gets the classes a rule can tell (`RULES`, `retrieval_class`);
misses of the tuning part also get the class a reading gave (`read`, kept in the output file
across runs). The per-question classification goes to bench/queries/question_misses.jsonl.

Then each fix tried (`VARIANTS`) is re-run offline with the product's page fusion
(`bench_quality.offline_pages`) and scored per class: MRR@10 before -> after, for the tuning
part and the held-out third apart. A fix keeps only what it changes: queries it does not touch
keep the default's lists.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import re
import sys
from collections.abc import Callable
from typing import Any

from bench.common import (  # noqa: E402
    RESULTS_DIR,
    bench_settings,
    bm25_only,
    corpus_dir,
    load_corpus_chunks,
    make_embedder,
    print_table,
)
from bench.quality import bench_quality as bq  # noqa: E402
from hetriever.core.config import Settings  # noqa: E402
from hetriever.core.logs import configure_logging  # noqa: E402
from hetriever.parse.links import LinkPrior, outbound_keys, page_keys  # noqa: E402
from hetriever.search import hybrid as search  # noqa: E402
from hetriever.search.gathering import candidate_depth  # noqa: E402
from hetriever.search.request import SearchRequest
from hetriever.search.results import is_question  # noqa: E402
from hetriever.store.bm25.analyzer import tokenize  # noqa: E402

OUT = bq.QUERIES / "question_misses.jsonl"
TOP = 3  # a miss: the answer is not among the default's first TOP pages

# Classes a rule tells from the question alone.
LOG_LINE = re.compile(  # a log or error line pasted as (part of) the question
    r"(?:^|[\s:(\"'])(?:ERROR|WARN|WARNING|FATAL|PANIC|panic)\b"
    r"|\b[Ee]rror: |\b[Ee]rror (?:calling|building|processing|executing|while|rendering)\b"
    r"|\bfailed to (?:transform|execute|render|build|parse|load|find|connect|export|create|start)\b"
    r"|[\w-]+\.\w+:\d+:\d+|\bZgotmplZ\b|\bTraceback\b|\b\w+(?:Exception|Error)\b:"
    r"|\bnil pointer\b|\bnot a field of\b|\bno such template\b|\bis not whitelisted\b"
    r"|\bcan't evaluate\b"
)
PADDING = re.compile(  # greetings, thanks, praise of a theme, apologies, "I'm new to"
    r"^\s*(?:hi|hello|hey|dear|greetings)\b|\bthanks?\b|\bthank you\b"
    r"|\b(?:great|nice|awesome|beautiful|lovely|amazing) (?:theme|job|work|project|template)\b"
    r"|\bi (?:really )?(?:love|like|enjoy) (?:the|this|your) (?:theme|template|project)\b"
    r"|\bsorry\b|\bpretty sure\b|\bi'?m (?:new to|a (?:total )?(?:newbie|beginner))\b"
    r"|\bnewbie\b|\bplease help\b|\bappreciated?\b",
    re.IGNORECASE,
)
RENAMED = re.compile(  # a removed, deprecated or renamed feature
    r"deprecat|\bremoved\b|no longer|renamed|used to (?:be|work)|after upgrading|\bupgrad",
    re.IGNORECASE,
)
RULES: dict[str, Callable[[dict], bool]] = {
    "log line": lambda item: bool(LOG_LINE.search(item["question"])),
    "padding": lambda item: bool(PADDING.search(item["question"])),
    "removed or renamed": lambda item: bool(RENAMED.search(item["question"])),
    "two pages": lambda item: len(item["answers"]) > 1,
    "long (> 40 words)": lambda item: len(item["question"].split()) > 40,
}

Scored = list[tuple[str, dict, float]]


def page_rank(pages: list[str], relevant: set[str], limit: int = 10) -> int | None:
    return next((i + 1 for i, p in enumerate(pages[:limit]) if p in relevant), None)


def list_pages(scored: Scored) -> list[str]:
    return list(dict.fromkeys(str(m.get("file_path", "")) for _, m, _ in scored))


def retrieval_class(ranks: dict[str, int | None]) -> str:
    """Where the retrievers left the answer of a miss: one of them had it in its first 3 pages
    (the fusion lost it), each had it in 10 / 100 chunks (ranked low), or neither."""
    dense, bm25 = ranks["dense_page"], ranks["bm25_page"]
    if bm25 is not None and bm25 <= TOP:
        return "fusion lost BM25's top 3"
    if dense is not None and dense <= TOP:
        return "fusion lost dense's top 3"
    if bm25 is None and (dense is None or dense > 10):
        return "neither retriever has it"
    return "both rank it low"


class Corpus:
    """One corpus's questions with their default pages and deep dense / BM25 lists."""

    def __init__(self, name: str, store: Any, items: list[dict]) -> None:
        self.name, self.store, self.items = name, store, items
        self.settings = store.settings
        self.prior = LinkPrior(
            store.catalog.pages, {name: store.physical_name(name)}, self.settings.link_prior_weight
        )
        self.lists: dict[str, tuple[Scored, Scored]] = {}
        self.default: dict[str, list[str]] = {}

    def retrieve(self, query: str) -> tuple[Scored, Scored]:
        if query not in self.lists:
            r = search.hybrid_search(
                self.store,
                SearchRequest(
                    query,
                    bq.DEEP,
                    repositories=[self.name],
                    hybrid=False,
                    exact=False,
                    group_by="chunk",
                ),
            )
            dense = [(m.doc_id, m.metadata, m.dense_score or 0.0) for m in r.matches]
            bm25 = [
                (h.doc_id, h.metadata, h.bm25_raw or 0.0)
                for h in bm25_only(self.store, query, bq.DEEP, namespaces=[self.name])
            ]
            self.lists[query] = (dense, bm25)
        return self.lists[query]

    def fuse(
        self,
        query: str,
        dense: Scored,
        bm25: Scored,
        dense_weight: float | None = None,
        prior_weight: float | None = None,
        extra: Any = None,
    ) -> list[str]:
        """The product's page fusion of these lists (bench_quality.offline_pages); `extra`
        replaces the links prior by another third list (an object with `values`, `weight`)."""
        s = self.settings
        weight = search.dense_weight_for(s, "", query) if dense_weight is None else dense_weight
        prior = None
        if is_question(s, "", query):
            prior = extra
            if prior is None:
                self.prior.weight = s.link_prior_weight if prior_weight is None else prior_weight
                prior = self.prior
        return bq.offline_pages(
            dense,
            bm25,
            candidate_depth(bq.K, "page"),
            fusion=s.fusion,
            k=s.rrf_k,
            dense_weight=weight,
            prior=prior,
            corpus=self.name,
        )


# -- the fixes tried, each a function (corpus, item) -> pages, or None when it leaves the
# question as the default search has it --


def _rare_identifier(corpus: Corpus, query: str, max_df: int = 50) -> bool:
    """The query names an identifier (`.Site.IsServer`, `pagerSize`, `OTEL_SERVICE_NAME`)
    that at most `max_df` chunks hold: an exact token BM25 can match."""
    index = corpus.store.search_bm25(corpus.name)
    for match in re.finditer(
        r"[.$]?[A-Za-z_]\w*(?:[._]\w+)+|[a-z]+[A-Z]\w*|[A-Z][a-z]+[A-Z]\w*", query
    ):
        term = match.group().strip(".$").lower()
        if len(term) > 2 and 0 < len(_postings(index, term)) <= max_df:
            return True
    return False


def _postings(index: Any, term: str) -> Any:
    state, vocab = index._current(), index._vocab or {}
    term_id = vocab.get(term)
    return [] if term_id is None else state.live_postings(term_id, len(vocab))[0]


def identifier_weight(corpus: Corpus, item: dict) -> list[str] | None:
    """Query-adaptive fusion: a question naming a rare identifier leans on BM25 (dense 0.4)."""
    q = item["question"]
    if not is_question(corpus.settings, "", q) or not _rare_identifier(corpus, q):
        return None
    return corpus.fuse(q, *corpus.retrieve(q), dense_weight=0.4)


def log_line_weight(corpus: Corpus, item: dict) -> list[str] | None:
    """A question holding a log line is fused as a look-up by name (`dense_weight_short`)."""
    q = item["question"]
    if not LOG_LINE.search(q):
        return None
    return corpus.fuse(q, *corpus.retrieve(q), dense_weight=corpus.settings.dense_weight_short)


_PAD_SPANS = re.compile(
    r"^\s*(?:hi|hello|hey|dear|greetings)\b[^.!?,]*[,.!:]?\s*"
    r"|\b(?:many |so much |in advance )*thanks?(?: you)?(?: (?:so much|a lot|in advance"
    r"|for [^.!?]*))?[.!]?|\bthank you(?: (?:so much|very much|in advance|for [^.!?]*))?[.!]?"
    r"|\b(?:great|nice|awesome|beautiful|lovely|amazing) (?:theme|job|work|project|template)"
    r"\b[^.!?]*[.!]?|\bi (?:really )?(?:love|like|enjoy) (?:the|this|your) (?:theme|template"
    r"|project)\b[^.!?]*[.!]?|\bsorry\b[^.!?]*[.!?]?|\bi'?m (?:new to|a (?:total )?(?:newbie"
    r"|beginner))\b[^.!?,]*[.!,]?|\bpretty sure\b,?|\bplease help\b[.!]?",
    re.IGNORECASE,
)


def strip_padding(query: str) -> str:
    out = " ".join(_PAD_SPANS.sub(" ", query).split()).strip(" ,")
    return out if len(out.split()) >= 3 else query


def padding_stripped(corpus: Corpus, item: dict) -> list[str] | None:
    """Conversational padding removed before both retrievers."""
    q = strip_padding(item["question"])
    if q == item["question"]:
        return None
    return corpus.fuse(q, *corpus.retrieve(q))


def links_prior_05(corpus: Corpus, item: dict) -> list[str] | None:
    """The links prior at 0.5 instead of 0.3 (questions only)."""
    q = item["question"]
    return corpus.fuse(q, *corpus.retrieve(q), prior_weight=0.5)


_LINK_TEXT = re.compile(r"(?<!!)\[(?P<text>[^\]\n]{2,120})\]\(\s*<?(?P<target>[^)\s>]+)")


class AnchorText:
    """A third list for questions beside the links prior: BM25 (k1 1.2, b 0.75) of the query
    against each page's incoming link texts (`[text](target)` in the other pages' Markdown),
    the words authors use for a page when they send readers to it."""

    def __init__(self, corpus: Corpus, anchor_weight: float) -> None:
        root = corpus_dir(corpus.name)
        metas: dict[str, dict] = {}
        for dense, bm25 in corpus.lists.values():
            for _, meta, _ in dense + bm25:
                metas.setdefault(str(meta.get("file_path", "")), meta)
        keys = {k: path for path, meta in metas.items() for k in page_keys(meta)}
        texts: dict[str, list[str]] = collections.defaultdict(list)
        for path, meta in metas.items():
            source = root / path if root else None
            if source is None or not source.is_file():
                continue
            for m in _LINK_TEXT.finditer(source.read_text(encoding="utf-8", errors="replace")):
                for key in outbound_keys(
                    f"[x]({m.group('target')})", path, str(meta.get("url") or ""), "content/en"
                ):
                    if keys.get(key, path) != path:
                        texts[keys[key]].append(m.group("text"))
                        break
        self.docs = {p: collections.Counter(tokenize(" ".join(t))) for p, t in texts.items()}
        self.df = collections.Counter(t for d in self.docs.values() for t in d)
        self.avg = sum(sum(d.values()) for d in self.docs.values()) / max(1, len(self.docs))
        self.corpus, self.anchor_weight, self.query = corpus, anchor_weight, ""
        self.weight = corpus.settings.link_prior_weight

    def bm25(self, path: str) -> float:
        tf, n = self.docs.get(path), len(self.docs)
        if not tf:
            return 0.0
        length, score = sum(tf.values()), 0.0
        for term in set(tokenize(self.query)):
            f = tf.get(term, 0)
            if f:
                idf = math.log(1 + (n - self.df[term] + 0.5) / (self.df[term] + 0.5))
                score += idf * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * length / self.avg))
        return score

    def values(self, pages: dict[str, tuple[str, dict]]) -> dict[str, float]:
        links = _z(self.corpus.prior.values(pages))
        anchors = _z({p: self.bm25(str(m.get("file_path", ""))) for p, (_, m) in pages.items()})
        return {p: links[p] + self.anchor_weight / self.weight * anchors[p] for p in pages}


def _z(values: dict[str, float]) -> dict[str, float]:
    if not values:
        return {}
    mean = sum(values.values()) / len(values)
    spread = math.sqrt(sum((v - mean) ** 2 for v in values.values()) / len(values)) or 1.0
    return {k: (v - mean) / spread for k, v in values.items()}


_ANCHORS: dict[str, AnchorText] = {}


def anchor_text(corpus: Corpus, item: dict) -> list[str] | None:
    q = item["question"]
    if not is_question(corpus.settings, "", q):
        return None
    if corpus.name not in _ANCHORS:
        corpus.prior.weight = corpus.settings.link_prior_weight
        _ANCHORS[corpus.name] = AnchorText(corpus, 0.1)
    extra = _ANCHORS[corpus.name]
    extra.query = q
    return corpus.fuse(q, *corpus.retrieve(q), extra=extra)


VARIANTS: dict[str, Callable[[Corpus, dict], list[str] | None]] = {
    "identifier -> dense 0.4": identifier_weight,
    "log line -> dense_weight_short": log_line_weight,
    "padding stripped": padding_stripped,
    "links prior 0.5": links_prior_05,
    "anchor texts, 0.1": anchor_text,
}


def mrr(ranks: list[int | None]) -> float:
    return round(sum(1.0 / r for r in ranks if r) / max(1, len(ranks)), 3)


def classify(corpus: Corpus, read: dict[str, str]) -> list[dict]:
    rows = []
    for item in corpus.items:
        q, relevant = item["question"], set(item["answers"])
        dense, bm25 = corpus.retrieve(q)
        got = search.hybrid_search(corpus.store, SearchRequest(q, bq.K, repositories=[corpus.name]))
        corpus.default[item["id"]] = bq.pages([m.metadata for m in got.matches])
        ranks = {
            "default": page_rank(corpus.default[item["id"]], relevant),
            "dense_page": page_rank(list_pages(dense), relevant, 100),
            "bm25_page": page_rank(list_pages(bm25), relevant, 100),
        }
        held = bq.held_out(item["id"])
        miss = ranks["default"] is None or ranks["default"] > TOP
        classes = [name for name, rule in RULES.items() if rule(item)]
        if miss:
            classes.append(retrieval_class(ranks))
        row = {
            "id": item["id"],
            "corpus": corpus.name,
            "part": "held-out" if held else "tuning",
            **ranks,
            "miss": miss,
            "classes": classes,
        }
        if miss:  # what came first instead, for the reading
            row["first_pages"] = corpus.default[item["id"]][:TOP]
        if miss and not held and item["id"] in read:
            row["read"] = read[item["id"]]
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", default=",".join(bq.CORPORA))
    args = parser.parse_args(argv)
    configure_logging("ERROR")
    read = {}
    if OUT.is_file():
        for line in OUT.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row.get("read"):
                read[row["id"]] = row["read"]
    embedder = make_embedder(bench_settings(RESULTS_DIR / "unused"))
    rows: list[dict] = []
    summary: list[tuple] = []
    fixes: list[tuple] = []
    for name in args.corpora.split(","):
        chunks = load_corpus_chunks(name, settings=Settings())
        items = bq.question_items(name)
        if chunks is None or not items:
            print(f"skipping {name}: corpus or questions not found", file=sys.stderr)
            continue
        store, _ = bq.index_corpus(chunks, embedder, "chunk")
        corpus = Corpus(name, store, items)
        got = classify(corpus, read)
        rows.extend(got)
        by_id = {i["id"]: i for i in items}
        for part in ("tuning", "held-out"):
            part_rows = [r for r in got if r["part"] == part]
            misses = [r for r in part_rows if r["miss"]]
            counts = collections.Counter(c for r in misses for c in r["classes"])
            counts.update(f"read: {r['read']}" for r in misses if r.get("read"))
            classes = {
                c: [r for r in part_rows if c in r["classes"] or f"read: {r.get('read')}" == c]
                for c in sorted(counts)
            }
            for c, members in classes.items():
                summary.append(
                    (name, part, c, counts[c], len(members), mrr([r["default"] for r in members]))
                )
            summary.append(
                (
                    name,
                    part,
                    "all questions",
                    len(misses),
                    len(part_rows),
                    mrr([r["default"] for r in part_rows]),
                )
            )
            for fix, run in VARIANTS.items():
                after = {}
                for r in part_rows:
                    pages = run(corpus, by_id[r["id"]])
                    after[r["id"]] = (
                        r["default"]
                        if pages is None
                        else page_rank(pages, set(by_id[r["id"]]["answers"]))
                    )
                for c, members in {**classes, "all questions": part_rows}.items():
                    before_ = mrr([r["default"] for r in members])
                    after_ = mrr([after[r["id"]] for r in members])
                    if before_ != after_ or c == "all questions":
                        fixes.append((name, part, fix, c, len(members), before_, after_))
        store.close_sync()
    OUT.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )
    print(
        "misses (answer not in the default's first 3 pages) by class; n = questions of the "
        "class, MRR@10 of the default over them"
    )
    print_table(("corpus", "part", "class", "misses", "n", "MRR@10"), summary)
    print("\nfixes tried, MRR@10 before -> after per class (classes a fix moves, and all)")
    print_table(("corpus", "part", "fix", "class", "n", "before", "after"), fixes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
