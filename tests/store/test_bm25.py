from __future__ import annotations

import math
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from hetriever.core.errors import IndexingError, InvalidFilterError, InvalidLimitError
from hetriever.store.bm25 import analyzer
from hetriever.store.bm25 import bm25_index as bm25_module
from hetriever.store.bm25 import sqlite_file as bm25_file
from hetriever.store.bm25.bm25_index import BM25Index, tokenize
from hetriever.store.filters import matches, validate_filter

REPO_ROOT = Path(__file__).resolve().parents[2]


def assert_same_hits(got, expected):
    assert [h[0] for h in got] == [h[0] for h in expected]
    assert [h[1] for h in got] == pytest.approx([h[1] for h in expected])


def idf(n: int, df: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def okapi(
    tf: float, length: float, avgdl: float, n: int, df: int, k1: float = 1.2, b: float = 0.75
) -> float:
    return idf(n, df) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avgdl))


@pytest.fixture
def index(tmp_path):
    with BM25Index(tmp_path / "bm25.sqlite") as ix:
        yield ix


# --- tokenizer ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Use .Site.Params here", ["use", "site.params", "site", "params"]),
        ("edit hugo.toml", ["edit", "hugo.toml", "hugo", "toml"]),
        (
            "snake_case to kebab-case",
            ["snake_case", "snake", "case", "kebab-case", "kebab", "case"],
        ),
        ("Hugo v0.123.0 to 0.124", ["hugo", "v0.123.0", "v0", "123", "0.124", "124"]),
        ("The QUICK, brown fox!", ["quick", "brown", "fox"]),
        ("e.g. a x y", []),
        ("{{ .Title }} -> $.Page", ["title", "page"]),
        ("café 日本語", ["café", "日本", "本語"]),  # CJK runs: character bigrams
        (
            "OpenTelemetryのトレース",
            ["opentelemetry", "open", "telemetry", "のト", "トレ", "レー", "ース"],
        ),
        ("可观测性 是", ["可观", "观测", "测性", "是"]),  # a lone CJK character is kept
        ("", []),
        # Stopwords that name Hugo template functions are terms (analyzer.TEMPLATE_NAMES).
        ("Use the where function with .Pages", ["use", "where", "function", "with", "pages"]),
        ("if and or not in", ["if", "and", "or", "not", "in"]),
    ],
)
def test_tokenize(text, expected):
    assert tokenize(text, stem=False) == expected


def test_where_function_finds_the_where_page(index):
    """A template function named by an English stopword is found by its name: the query's
    other word ("function") is everywhere in a function reference."""
    pages = {
        "where": "collections.Where\nReturns a slice by filtering the given slice based on a "
        "key, operator, and value.",
        "apply": "collections.Apply\nReturns a slice by applying a function to each element "
        "of the given slice. The function is named by a string.",
        "math": "Math functions\nUse these functions to perform mathematical operations.",
        "in": "collections.In\nReports whether a value exists within the given slice or string.",
    }
    index.upsert(list(pages), list(pages.values()))
    assert index.search("where function", 4)[0][0] == "where"
    assert index.search("in function", 4)[0][0] == "in"


def test_tokenize_stems_by_default():
    assert tokenize("templates taxonomies rendering", stem=False) == [
        "templates",
        "taxonomies",
        "rendering",
    ]
    # Inflections of one word meet at one stem, whatever the word's length.
    assert tokenize("templates taxonomies rendering") == tokenize("Template taxonomy render")
    assert tokenize("adds adding added") == tokenize("add add add") == ["add"] * 3
    assert tokenize("uses using") == tokenize("use use")
    # Whole joined identifiers and numbers are left alone; parts are stemmed.
    assert tokenize("hugo.toml class is .Site.Params v1.2.3s") == [
        "hugo.toml",
        "hugo",
        "toml",
        "class",
        "site.params",
        "site",
        "param",
        "v1.2.3s",
        "v1",
        "3s",
    ]


@pytest.mark.parametrize(
    "text, expected",
    [
        # camelCase: the identifier, then its humps.
        ("RelPermalink", ["relpermalink", "rel", "permalink"]),
        ("IsPage", ["ispage", "page"]),  # "is" is a stopword
        ("BuildDrafts", ["builddrafts", "build", "drafts"]),
        # acronyms end before a capitalised word; a plural acronym keeps its acronym
        ("HTTPServer getURL", ["httpserver", "http", "server", "geturl", "get", "url"]),
        ("URLs", ["urls", "url"]),  # stemmed: ["url"]
        # letter/digit boundaries
        ("FNV32a", ["fnv32a", "fnv", "32"]),
        ("Base64Encode", ["base64encode", "base", "64", "encode"]),
        # joined identifiers: the whole, each part, each part's pieces
        (".Site.BaseURL", ["site.baseurl", "site", "baseurl", "base", "url"]),
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            ["otel_exporter_otlp_endpoint", "otel", "exporter", "otlp", "endpoint"],
        ),
        # lower-case words and non-ASCII words are not split
        ("permalink café", ["permalink", "café"]),
    ],
)
def test_tokenize_splits_identifiers(text, expected):
    assert tokenize(text, stem=False) == expected


def test_identifier_query_finds_its_pieces(index):
    """A query for the pieces finds the identifier, and the identifier finds its pieces."""
    index.upsert(
        ["camel", "plain"],
        ["Use .RelPermalink for the page's relative URL", "A permalink is the page's full address"],
    )
    assert index.search("RelPermalink", 2)[0][0] == "camel"
    assert {d for d, _ in index.search("rel permalink", 2)} == {"camel", "plain"}
    assert index.search("rel permalink", 2)[0][0] == "camel"


# --- scoring -----------------------------------------------------------------------

DOCS = {
    "d1": "apple apple banana",  # 3 tokens
    "d2": "apple cherry",  # 2 tokens
    "d3": "cherry date elderberry fig",  # 4 tokens
}


def test_scores_match_hand_computed_okapi(index):
    index.upsert(list(DOCS), list(DOCS.values()), [{} for _ in DOCS])
    avgdl = 3.0
    hits = dict(index.search("apple", 10))
    assert hits == {
        "d1": pytest.approx(okapi(2, 3, avgdl, 3, 2)),
        "d2": pytest.approx(okapi(1, 2, avgdl, 3, 2)),
    }
    # Two terms add up; d3 has only "fig" (df=1).
    hits = dict(index.search("apple fig", 10))
    assert hits["d3"] == pytest.approx(okapi(1, 4, avgdl, 3, 1))
    assert hits["d2"] == pytest.approx(okapi(1, 2, avgdl, 3, 2))


def test_a_word_pair_in_a_heading_adds_the_idf_of_its_rarer_word(index):
    # Both chunks hold the words "service" and "name"; only the first is titled with the phrase.
    texts = {
        "faq": "Any text about a service and its name.",
        "body": "The service has a name; the name of a service is set.",
        "other": "Nothing to see.",
    }
    metas = {
        "faq": {"title": "FAQ", "heading_context": "How do I set the service name?"},
        "body": {"title": "Services", "heading_context": "Overview"},
        "other": {"title": "Other"},
    }
    index.upsert(list(texts), list(texts.values()), [metas[i] for i in texts])
    words = dict(BM25Index(index.path, phrase_weight=0).search("service name", 10))
    hits = dict(index.search("service name", 10))
    assert words["body"] > words["faq"]  # by words alone the body chunk wins
    # "servic name" is found in the FAQ heading: + max(idf(servic), idf(name)), df 2 of 3
    assert hits["faq"] == pytest.approx(words["faq"] + index.phrase_weight * idf(3, 2))
    assert hits["body"] == pytest.approx(words["body"])  # the words, not the phrase, in its body
    assert [h[0] for h in index.search("service name", 10)][0] == "faq"
    # the order matters: "name service" is not the heading's pair
    assert dict(index.search("name service", 10))["faq"] == pytest.approx(words["faq"])


def test_a_page_record_is_titled_by_its_description(index):
    index.upsert(
        ["rec", "body"],
        [
            "Sampling\nHow to sample traces at the head.",
            "Sampling traces at the head: head sampling.",
        ],
        [
            {
                "title": "Sampling",
                "page_record": True,
                "description": "How to sample traces at the head.",
            },
            {"title": "Sampling", "heading_context": "Overview"},
        ],
    )
    words = dict(BM25Index(index.path, phrase_weight=0).search("sample traces", 10))
    hits = dict(index.search("sample traces", 10))
    assert hits["rec"] > words["rec"] and hits["body"] == pytest.approx(words["body"])


def test_asking_for_more_results_never_reorders_the_first(index):
    # 30 chunks share the words; the one titled with the phrase ranks low on words alone.
    ids = [f"c{i:02d}" for i in range(30)]
    texts = ["service name " * (1 + i % 3) + "filler " * i for i in range(30)]
    metas = [
        {"title": "T", "heading_context": "Service name" if i == 29 else f"Part {i}"}
        for i in range(30)
    ]
    index.upsert(ids, texts, metas)
    everything = index.search("service name", 30)
    assert everything[0][0] == "c29"
    for k in (1, 3, 10):
        assert index.search("service name", k) == everything[:k]


def test_only_a_fixed_depth_is_rescored_so_a_deep_search_keeps_the_order(index, monkeypatch):
    monkeypatch.setattr(bm25_module, "PHRASE_CANDIDATES", 5)
    monkeypatch.setattr("hetriever.store.bm25.phrases.PHRASE_CANDIDATES", 5)
    ids = [f"c{i:02d}" for i in range(12)]
    texts = ["service name " + "filler " * i for i in range(12)]
    metas = [
        {"title": "T", "heading_context": "Service name" if i in (2, 9) else f"Part {i}"}
        for i in range(12)
    ]
    index.upsert(ids, texts, metas)
    deep = index.search("service name", 12)
    # c02 is among the 5 best by words and gains; c09 is not, and keeps its place by words
    assert deep[0][0] == "c02" and [h[0] for h in deep].index("c09") == 9
    for k in (2, 5, 8):
        assert index.search("service name", k) == deep[:k]


def test_a_negative_phrase_weight_is_refused(tmp_path):
    from hetriever.core.errors import KnowledgeStoreError

    with pytest.raises(KnowledgeStoreError, match="phrase_weight"):
        BM25Index(tmp_path / "x.sqlite", phrase_weight=-1)


def test_custom_k1_b(tmp_path):
    with BM25Index(tmp_path / "x.sqlite", k1=2.0, b=0.0) as ix:
        ix.upsert(list(DOCS), list(DOCS.values()))
        assert dict(ix.search("apple", 10))["d1"] == pytest.approx(
            okapi(2, 3, 3.0, 3, 2, k1=2.0, b=0.0)
        )


def test_saturation_and_length_normalisation(index):
    filler = " ".join(f"w{i}" for i in range(30))
    index.upsert(
        ["tf1", "tf2", "tf8", "long", "other1", "other2"],
        [
            "zebra " + filler[:20],
            "zebra zebra " + filler[:14],
            "zebra " * 8,
            "zebra " + filler,
            "lion tiger",
            "lion bear",
        ],
    )
    s = dict(index.search("zebra", 10))
    # More occurrences score higher, with diminishing returns...
    assert s["tf8"] > s["tf2"] > s["tf1"]
    assert (s["tf2"] - s["tf1"]) > (s["tf8"] - s["tf2"]) / 6
    # ...bounded by idf * (k1 + 1).
    assert s["tf8"] < idf(6, 4) * 2.2
    # The same single occurrence weighs less in a longer document.
    assert s["tf1"] > s["long"]


def test_rare_term_ranks_first(index):
    index.upsert(
        [f"d{i}" for i in range(20)],
        [f"hugo templates page {i}" for i in range(19)] + ["hugo templates page with shortcodes"],
    )
    hits = index.search("hugo shortcodes", 5)
    assert hits[0][0] == "d19"
    assert len(hits) == 5
    assert [h[1] for h in hits] == sorted((h[1] for h in hits), reverse=True)


def test_empty_and_unknown_queries(index):
    index.upsert(["a"], ["some text"])
    assert index.search("", 5) == []
    assert index.search("the and of", 5) == []  # stopwords only
    assert index.search("unseen", 5) == []
    with pytest.raises(InvalidLimitError):
        index.search("text", 0)
    assert BM25Index(index.path.parent / "empty.sqlite").search("text", 3) == []


def test_identifier_queries_find_docs(index):
    index.upsert(
        ["cfg", "params", "other"],
        [
            "Put settings in hugo.toml at the project root.",
            "Read site parameters with .Site.Params in templates.",
            "Something about content and pages.",
        ],
    )
    assert index.search("hugo.toml", 3)[0][0] == "cfg"
    assert index.search("site.params", 3)[0][0] == "params"
    assert index.search("params", 3)[0][0] == "params"


# --- writes ------------------------------------------------------------------------


def test_upsert_replace_delete_and_get(index):
    index.upsert(["a", "b"], ["red apple", "green pear"], [{"n": 1}, {"n": 2}])
    assert index.count() == 2 and index.ids() == {"a", "b"}
    assert index.get("a") == ("red apple", {"n": 1})
    assert index.get("zzz") is None

    index.upsert(["a"], ["yellow banana"], [{"n": 3, "tags": ["fruit"]}])
    assert index.count() == 2
    assert index.get("a") == ("yellow banana", {"n": 3, "tags": ["fruit"]})
    assert index.search("apple", 5) == []
    assert [h[0] for h in index.search("banana", 5)] == ["a"]

    assert index.delete(["a", "missing"]) == 1
    assert index.delete([]) == 0
    assert index.ids() == {"b"}
    assert index.search("banana", 5) == []


def test_delete_where_removes_a_files_chunks(index):
    index.upsert(
        ["a1", "a2", "b1"],
        ["alpha one", "alpha two", "alpha three"],
        [{"file_path": "a.md"}, {"file_path": "a.md"}, {"file_path": "b.md"}],
    )
    assert index.delete_where({"file_path": "a.md"}) == ["a1", "a2"]
    assert index.ids() == {"b1"}
    assert [h[0] for h in index.search("alpha", 5)] == ["b1"]
    assert index.delete_where({"file_path": "a.md"}) == []
    with pytest.raises(IndexingError):
        index.delete_where(None)


def test_upsert_rejects_bad_input(index):
    with pytest.raises(IndexingError, match="2 ids, 1 texts"):
        index.upsert(["a", "b"], ["x"])
    with pytest.raises(IndexingError, match="duplicate"):
        index.upsert(["a", "a"], ["x", "y"])
    with pytest.raises(IndexingError, match="not storable"):
        index.upsert(["a"], ["x"], [{"bad": float("nan")}])
    assert index.count() == 0  # the failed write left nothing behind


# --- filters -----------------------------------------------------------------------


def test_search_applies_filters(index):
    metas = [
        {
            "repository": "hugo",
            "section": "functions",
            "chunk_index": i % 3,
            "tags": ["go"] if i % 2 else ["yaml"],
        }
        for i in range(12)
    ]
    metas += [{"repository": "otel", "section": "docs", "chunk_index": 0} for _ in range(4)]
    ids = [f"d{i}" for i in range(16)]
    index.upsert(ids, [f"collector config item {i}" for i in range(16)], metas)

    def hits(where):
        return {h[0] for h in index.search("collector config", 50, where)}

    assert hits(None) == set(ids)
    assert hits({"repository": "otel"}) == {"d12", "d13", "d14", "d15"}
    assert hits({"repository": "hugo", "chunk_index": {"$gte": 2}}) == {"d2", "d5", "d8", "d11"}
    assert hits({"tags": {"$contains": "go"}}) == {"d1", "d3", "d5", "d7", "d9", "d11"}
    assert hits({"$or": [{"section": "docs"}, {"chunk_index": 1}]}) == {
        "d1",
        "d4",
        "d7",
        "d10",
        "d12",
        "d13",
        "d14",
        "d15",
    }
    assert hits({"repository": "nope"}) == set()
    # Only k results, the best ones, even when the filter is selective.
    assert len(index.search("collector", 2, {"repository": "otel"})) == 2
    assert index.ids_where({"repository": "otel", "chunk_index": 0}) == {"d12", "d13", "d14", "d15"}
    assert index.ids_where({"chunk_index": {"$ne": 0}}) == {f"d{i}" for i in range(12) if i % 3}
    with pytest.raises(InvalidFilterError):
        index.search("collector", 3, {"repository": {"$like": "o%"}})


def test_filters_follow_updates_and_deletes(index):
    index.upsert(["a", "b"], ["shared words", "shared words"], [{"v": "x"}, {"v": "x"}])
    assert {h[0] for h in index.search("shared", 5, {"v": "x"})} == {"a", "b"}
    index.upsert(["a"], ["shared words"], [{"v": "y"}])
    assert {h[0] for h in index.search("shared", 5, {"v": "x"})} == {"b"}
    assert index.ids_where({"v": "y"}) == {"a"}
    index.delete(["b"])
    assert index.search("shared", 5, {"v": "x"}) == []


def test_few_ids_where_lists_exact_matches_within_the_limit(index):
    index.upsert(
        [f"d{i}" for i in range(10)],
        ["text"] * 10,
        [{"sec": "a" if i < 3 else "b", "hidden": i == 1, "n": i} for i in range(10)],
    )
    assert sorted(index.few_ids_where({"sec": "a"}, 5)) == ["d0", "d1", "d2"]
    assert sorted(index.few_ids_where({"sec": {"$in": ["a", "zz"]}}, 3)) == ["d0", "d1", "d2"]
    # The equality narrows to three; the `$ne` is then checked on each.
    assert sorted(index.few_ids_where({"$and": [{"sec": "a"}, {"hidden": {"$ne": True}}]}, 3)) == [
        "d0",
        "d2",
    ]
    assert index.few_ids_where({"sec": "zz"}, 5) == []
    # More candidates than the limit, or no equality to narrow by: no list.
    assert index.few_ids_where({"sec": "b"}, 6) is None
    assert index.few_ids_where({"n": {"$gt": 7}}, 100) is None
    assert index.few_ids_where({"$or": [{"sec": "a"}, {"n": 9}]}, 100) is None


def test_ids_where_answers_equalities_from_the_index_as_a_scan_would(index):
    metas = [{"file_path": f"p{i % 4}.md", "n": i % 3, "flag": i % 2 == 0} for i in range(12)]
    metas[5]["file_path"] = ["p1.md"]  # a list never equals a scalar
    index.upsert([f"d{i}" for i in range(12)], ["text"] * 12, metas)
    index.delete(["d0"])

    def scan(where):
        return {
            f"d{i}" for i, m in enumerate(metas) if i != 0 and matches(validate_filter(where), m)
        }

    for where in (
        {"file_path": {"$in": ["p0.md", "p1.md", "zz.md"]}},
        {"file_path": "p2.md"},
        {"n": {"$in": [1.0, 2.0]}},  # 1 == 1.0
        {"flag": True},  # a bool is not the number 1
        {"n": True},
        {"$and": [{"file_path": {"$in": ["p0.md", "p1.md"]}}, {"n": 1}]},
        {"$and": [{"file_path": {"$in": ["p0.md", "p1.md"]}}, {"n": {"$ne": 1}}]},
    ):
        assert index.ids_where(where) == scan(where), where
    assert index.ids_where({"file_path": {"$in": ["p1.md"]}}) == {"d1", "d9"}
    with index.transaction():  # uncommitted rows are tested by value keys too
        index.delete(["d1"])
        more = [{"file_path": "p1.md", "n": 1.0, "flag": True}, {"file_path": ["p1.md"], "n": 1}]
        index.upsert(["e0", "e1"], ["text"] * 2, more)
        metas += more
        for where in (
            {"file_path": {"$in": ["p1.md", "zz.md"]}},
            {"n": 1},
            {"$and": [{"file_path": "p1.md"}, {"flag": True}]},
            {"flag": 1},
        ):
            expected = {
                f"d{i}"
                for i, m in enumerate(metas[:12])
                if i not in (0, 1) and matches(validate_filter(where), m)
            }
            expected |= {f"e{i}" for i, m in enumerate(more) if matches(validate_filter(where), m)}
            assert index.ids_where(where) == expected, where


def test_file_counts_are_live_chunks_per_file(index):
    index.upsert(
        ["a", "b", "c", "d", "e"],
        ["t"] * 5,
        [
            {"file_path": "x.md"},
            {"file_path": "x.md"},
            {"file_path": "y.md"},
            {"file_path": "y.md", "is_deleted": True},
            {"other": 1},
        ],
    )
    assert index.file_counts() == {"x.md": 2, "y.md": 1}
    index.delete(["a"])
    index.upsert(["c"], ["t"], [{"file_path": "z.md"}])
    assert index.file_counts() == {"x.md": 1, "z.md": 1}
    with index.transaction():
        index.delete(["b"])
        assert index.file_counts() == {"x.md": 1, "z.md": 1}  # committed state only
    assert index.file_counts() == {"z.md": 1}


def test_file_counts_read_from_the_file_agree_with_the_in_memory_index(tmp_path):
    path = tmp_path / "bm25.sqlite"
    metas = [
        {"file_path": "x.md"},
        {"file_path": "x.md"},
        {"file_path": "y.md"},
        {"file_path": "y.md", "is_deleted": True},
        {"file_path": "z.md", "is_deleted": False},
        {"other": 1},
        {"file_path": 7},
    ]
    with BM25Index(path) as writer:
        writer.upsert([f"d{i}" for i in range(len(metas))], ["t"] * len(metas), metas)
        from_file = writer.file_counts()
        assert writer._state is None  # answered without loading the in-memory index
        with writer.transaction():
            writer.delete(["d0"])
            assert writer.file_counts() == from_file  # committed state only
        after_delete = writer.file_counts()
    with BM25Index(path) as reader:
        reader.search("t", 1)  # a searching process: its index is in memory
        assert reader._state is not None
        assert reader.file_counts() == after_delete == {"x.md": 1, "y.md": 1, "z.md": 1}
    assert from_file == {"x.md": 2, "y.md": 1, "z.md": 1}


def test_ids_of_files_match_ids_where_and_see_the_open_transaction(index):
    index.upsert(
        ["a1", "a2", "b1", "c1"],
        ["t"] * 4,
        [
            {"file_path": "a.md"},
            {"file_path": "a.md", "is_deleted": True},
            {"file_path": "b.md"},
            {"file_path": "c.md"},
        ],
    )
    files = ["a.md", "b.md", "missing.md"]
    assert (
        index.ids_of_files(files)
        == index.ids_where({"file_path": {"$in": files}})
        == {"a1", "a2", "b1"}
    )
    with index.transaction():
        index.delete(["a1"])
        index.upsert(["b2"], ["t"], [{"file_path": "b.md"}])
        assert index.ids_of_files(files) == {"a2", "b1", "b2"}
    assert index.ids_of_files(["c.md"]) == {"c1"} and index.ids_of_files([]) == set()


def test_the_first_write_adds_the_index_of_documents_by_file(tmp_path):
    import sqlite3

    path = tmp_path / "bm25.sqlite"
    with BM25Index(path) as ix:
        ix.upsert(["a"], ["t"], [{"file_path": "a.md"}])
    with sqlite3.connect(path) as db:  # an index file written before the index existed
        db.execute("DROP INDEX docs_file_path")
    with BM25Index(path) as ix:
        assert ix.ids_of_files(["a.md"]) == {"a"}  # a scan until then
        ix.upsert(["b"], ["t"], [{"file_path": "a.md"}])
    with sqlite3.connect(path) as db:
        plan = " ".join(
            str(row)
            for row in db.execute(
                "EXPLAIN QUERY PLAN SELECT id FROM docs "
                "WHERE json_extract(metadata, '$.file_path') IN ('a.md')"
            )
        )
    assert "docs_file_path" in plan


def test_few_ids_where_follows_committed_writes_from_another_index(tmp_path):
    path = tmp_path / "bm25.sqlite"
    with BM25Index(path) as writer, BM25Index(path) as reader:
        writer.upsert(["a", "b"], ["x", "y"], [{"sec": "s"}, {"sec": "s"}])
        assert sorted(reader.few_ids_where({"sec": "s"}, 10)) == ["a", "b"]
        with writer.transaction():
            writer.delete(["a"])
            writer.upsert(["c"], ["z"], [{"sec": "s"}])
            # Uncommitted: the reader still answers from the committed generation.
            assert sorted(reader.few_ids_where({"sec": "s"}, 10)) == ["a", "b"]
        assert sorted(reader.few_ids_where({"sec": "s"}, 10)) == ["b", "c"]


# --- transactions, persistence, concurrency -----------------------------------------


def test_persistence_across_reopen(tmp_path):
    path = tmp_path / "bm25.sqlite"
    with BM25Index(path) as ix:
        ix.upsert(["a", "b"], ["persistent apple", "volatile pear"], [{"k": 1}, {"k": 2}])
        before = ix.search("apple pear", 5)
        ix.delete(["b"])
        ix.upsert(["c"], ["another pear"], [{"k": 3}])
        after = ix.search("apple pear", 5)
    assert before
    with BM25Index(path) as ix:
        assert ix.ids() == {"a", "c"}
        assert ix.get("c") == ("another pear", {"k": 3})
        assert_same_hits(ix.search("apple pear", 5), after)


def test_second_index_sees_committed_writes(tmp_path):
    path = tmp_path / "bm25.sqlite"
    with BM25Index(path) as writer, BM25Index(path) as reader:
        writer.upsert(["a"], ["first document"], [{"f": "a.md"}])
        assert [h[0] for h in reader.search("document", 5)] == ["a"]  # loaded
        writer.upsert(["b"], ["second document"], [{"f": "b.md"}])
        writer.delete(["a"])
        assert [h[0] for h in reader.search("document", 5)] == ["b"]  # caught up
        assert reader.ids_where({"f": "b.md"}) == {"b"}
        with writer.transaction():
            writer.upsert(["c"], ["third document"], [{"f": "c.md"}])
            # Uncommitted: the writer's own reads see it, the other index does not.
            assert writer.ids_where({"f": "c.md"}) == {"c"}
            assert reader.ids() == {"b"}
            assert [h[0] for h in reader.search("document", 5)] == ["b"]
        assert {h[0] for h in reader.search("document", 5)} == {"b", "c"}


def test_opening_an_index_does_not_wait_for_a_writer(tmp_path):
    # A searcher starting while an ingest holds the write transaction must not block on it.
    path = tmp_path / "bm25.sqlite"
    with BM25Index(path) as writer:
        writer.upsert(["a"], ["first document"], [{"f": "a.md"}])
        opened: list[BM25Index] = []
        with writer.transaction():
            writer.upsert(["b"], ["second document"], [{"f": "b.md"}])
            thread = threading.Thread(target=lambda: opened.append(BM25Index(path)), daemon=True)
            thread.start()
            thread.join(timeout=10)
            assert opened, "opening waited for the writer's transaction"
            assert [h[0] for h in opened[0].search("document", 5)] == ["a"]
        assert {h[0] for h in opened[0].search("document", 5)} == {"a", "b"}
        opened[0].close()


def test_reader_reloads_when_changelog_was_trimmed(tmp_path, monkeypatch):
    path = tmp_path / "bm25.sqlite"
    monkeypatch.setattr(bm25_file, "_LOG_KEEP_GENERATIONS", 2)
    with BM25Index(path) as writer, BM25Index(path) as reader:
        writer.upsert(["a"], ["alpha"])
        assert reader.search("alpha", 1)[0][0] == "a"
        for i in range(5):
            writer.upsert([f"b{i}"], [f"beta {i}"])
        writer.delete(["a"])
        assert reader.search("alpha", 1) == []
        assert reader.stats()["docs"] == 5


def test_transaction_rollback_keeps_previous_state(tmp_path):
    path = tmp_path / "bm25.sqlite"
    with BM25Index(path) as ix:
        ix.upsert(["a", "b"], ["kept apple", "kept pear"], [{"f": "x"}, {"f": "y"}])
        before = ix.search("apple pear kept", 5)
        with pytest.raises(RuntimeError):
            with ix.transaction():
                ix.delete_where({"f": "x"})
                ix.upsert(["c", "b"], ["new melon", "changed pear"], [{"f": "z"}, {"f": "z"}])
                assert ix.ids() == {"b", "c"}
                raise RuntimeError("boom")
        assert ix.ids() == {"a", "b"}
        assert ix.get("b") == ("kept pear", {"f": "y"})
        assert ix.search("apple pear kept", 5) == before
        assert ix.search("melon", 5) == []
        # The index still works after a rollback (new terms get consistent ids).
        ix.upsert(["d"], ["fresh melon"])
        assert ix.search("melon", 5)[0][0] == "d"
    with BM25Index(path) as ix:
        assert ix.ids() == {"a", "b", "d"}
        assert ix.search("melon", 5)[0][0] == "d"


def test_crash_mid_transaction_leaves_previous_state(tmp_path):
    path = tmp_path / "bm25.sqlite"
    with BM25Index(path) as ix:
        ix.upsert(["a"], ["before the crash"])
    script = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from hetriever.store.bm25.bm25_index import BM25Index\n"
        "ix = BM25Index(Path(sys.argv[1]))\n"
        "with ix.transaction():\n"
        "    ix.upsert(['b'], ['half written'])\n"
        "    ix.delete(['a'])\n"
        "    os._exit(3)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(path)], cwd=REPO_ROOT)
    assert proc.returncode == 3
    with BM25Index(path) as ix:
        assert ix.ids() == {"a"}
        assert ix.search("crash", 5)[0][0] == "a"
        assert ix.search("half", 5) == []


def test_other_process_writes_are_seen(tmp_path):
    path = tmp_path / "bm25.sqlite"
    with BM25Index(path) as ix:
        ix.upsert(["a"], ["local doc"])
        assert ix.search("remote", 5) == []
        script = (
            "import sys\nfrom pathlib import Path\nfrom hetriever.store.bm25.bm25_index import BM25Index\n"
            "with BM25Index(Path(sys.argv[1])) as ix:\n"
            "    ix.upsert(['r'], ['remote doc'], [{'by': 'other'}])\n"
        )
        subprocess.run([sys.executable, "-c", script, str(path)], cwd=REPO_ROOT, check=True)
        assert [h[0] for h in ix.search("remote", 5)] == ["r"]
        assert ix.ids_where({"by": "other"}) == {"r"}


def test_threads_read_consistent_state_while_writing(tmp_path):
    path = tmp_path / "bm25.sqlite"
    errors: list[str] = []
    with BM25Index(path) as ix:
        ix.upsert(["base"], ["shared word"])
        stop = threading.Event()

        def reader():
            while not stop.is_set():
                # Each write replaces one group atomically: a group is all-or-nothing.
                found = {h[0] for h in ix.search("group", 100)}
                groups = {doc_id.split(":")[0] for doc_id in found}
                for g in groups:
                    if {f"{g}:{j}" for j in range(3)} - found:
                        errors.append(f"partial group {g}: {sorted(found)}")

        threads = [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        for i in range(30):
            with ix.transaction():
                ix.upsert([f"g{i}:{j}" for j in range(3)], [f"group item {j}" for j in range(3)])
        stop.set()
        for t in threads:
            t.join()
    assert errors == []


def test_compaction_keeps_results(tmp_path, monkeypatch):
    path = tmp_path / "bm25.sqlite"
    with BM25Index(path) as ix:
        ix.upsert([f"d{i}" for i in range(50)], [f"word{i % 7} common" for i in range(50)])
        ix.search("common", 1)  # load
        state = ix._state
        for i in range(0, 50, 2):
            ix.upsert([f"d{i}"], [f"word{i % 5} common changed"])
        ix.delete([f"d{i}" for i in range(1, 20, 2)])
        before = ix.search("common changed word3", 60)
        assert state is ix._state and state.dead > 0 and state.delta_parts
        state.compact(len(ix._vocab))
        assert state.dead == 0 and not state.delta_parts
        assert_same_hits(ix.search("common changed word3", 60), before)
        assert ix.ids_where({}) == ix.ids()
    with BM25Index(path) as fresh:
        assert_same_hits(fresh.search("common changed word3", 60), before)


def test_metadata_comes_back_as_written_through_reopen_updates_and_compaction(tmp_path):
    """Metadata is held as columns (one list per key); every chunk must still read back its
    own keys only, lists as lists, and a caller's copy must not reach the index."""
    path = tmp_path / "bm25.sqlite"
    written = {
        f"d{i}": {
            "title": f"Page {i % 3}",
            "chunk_index": i,
            "has_code": i % 2 == 0,
            **({"aliases": [f"/a{i}", "/b"]} if i % 4 == 0 else {}),
            **({"weight": 1.5} if i == 7 else {}),
        }
        for i in range(40)
    }
    with BM25Index(path) as ix:
        ix.upsert(list(written), ["common words"] * 40, list(written.values()))
        ix.search("common", 1)  # load the in-memory state
        written["d41"] = {"title": "Late", "lang": "de"}  # a key no earlier chunk has
        ix.upsert(["d41"], ["common late"], [written["d41"]])
        for i in range(0, 40, 3):
            written[f"d{i}"] = {"title": "Changed", "aliases": ["/c"]}
            ix.upsert([f"d{i}"], ["common changed"], [written[f"d{i}"]])
        ix.delete([f"d{i}" for i in range(1, 40, 5)])
        for i in range(1, 40, 5):
            del written[f"d{i}"]
        ix._state.compact(len(ix._vocab))
        got = ix.metadata_of(list(written))
        assert got == written
        assert all(type(m.get("aliases", [])) is list for m in got.values())
        got["d0"]["aliases"].append("/mutated")
        assert ix.metadata_of(["d0"])["d0"] == {"title": "Changed", "aliases": ["/c"]}
        assert ix.ids_where({"lang": "de"}) == {"d41"}
        assert ix.ids_where({"aliases": {"$contains": "/b"}}) == {
            d for d, m in written.items() if "/b" in m.get("aliases", [])
        }
        # Only some keys (what a result's translations show): those each chunk has.
        assert ix.metadata_of(list(written), keys=("lang", "aliases")) == {
            d: {k: v for k, v in m.items() if k in ("lang", "aliases")} for d, m in written.items()
        }
    with BM25Index(path) as fresh:
        assert fresh.metadata_of(list(written)) == written


@pytest.mark.parametrize("block", [1, 7, 1 << 18])
@pytest.mark.parametrize("n_terms", [50, 70_000])  # 16-bit radix sort keys, and wider ones
def test_postings_ordered_block_by_block_equal_one_stable_sort(monkeypatch, block, n_terms):
    import numpy as np

    from hetriever.store.bm25 import memory as bm25_memory

    monkeypatch.setattr(bm25_memory, "SORT_BLOCK", block)
    rng = np.random.default_rng(block)
    per_doc = rng.integers(0, 9, size=300)
    docs = np.repeat(np.arange(len(per_doc), dtype=np.int32), per_doc)
    terms = rng.integers(0, n_terms, size=len(docs)).astype(np.int32)
    tfs = rng.integers(1, 5, size=len(docs)).astype(np.uint16)
    segment = bm25_memory._Segment(terms, docs, tfs, n_terms)
    order = np.argsort(terms, kind="stable")
    assert segment.docs.tolist() == docs[order].tolist()
    by_ends = bm25_memory._Segment(terms, None, tfs, n_terms, doc_ends=np.cumsum(per_doc))
    assert by_ends.docs.tolist() == segment.docs.tolist()
    assert by_ends.tfs.tolist() == segment.tfs.tolist()
    assert segment.tfs.tolist() == tfs[order].astype(np.float32).tolist()
    assert segment.offsets.tolist() == [0, *np.cumsum(np.bincount(terms, minlength=n_terms))]
    for term in rng.integers(0, n_terms, size=20):
        got_docs, _ = segment.postings(int(term))
        assert got_docs.tolist() == docs[terms == term].tolist()


def test_drop_deletes_files(tmp_path):
    path = tmp_path / "sub" / "bm25.sqlite"
    ix = BM25Index(path)
    ix.upsert(["a"], ["x y"])
    ix.drop()
    assert not any(path.parent.iterdir())


def test_index_written_with_another_tokenizer_is_retokenized(tmp_path, monkeypatch):
    path = tmp_path / "bm25.sqlite"
    monkeypatch.setattr(bm25_module, "STEM_DEFAULT", False)
    with BM25Index(path) as ix:
        ix.upsert(["a"], ["Partial templates"], [{"f": "a.md"}])
        assert ix.search("templates", 3)[0][0] == "a"
    with BM25Index(path) as old:
        old.upsert(["b"], ["Unrelated words"])
        assert old.search("partial", 3)[0][0] == "a"  # loaded, with the old term ids
        monkeypatch.setattr(bm25_module, "STEM_DEFAULT", True)
        with BM25Index(path) as ix:
            # "template" only matches "templates" if the stored postings were rebuilt stemmed.
            assert [h[0] for h in ix.search("template", 3)] == ["a"]
            assert ix.get("a") == ("Partial templates", {"f": "a.md"})
        # An index that was open during the rebuild notices the new term ids.
        assert [h[0] for h in old.search("template", 3)] == ["a"]
        old.upsert(["c"], ["more templates here"])
        assert {h[0] for h in old.search("unrelated template", 3)} == {"a", "b", "c"}


def test_index_written_before_template_names_were_terms_is_retokenized(tmp_path, monkeypatch):
    """An index of tokenizer version 3 dropped `where`; opened by this version, it finds it."""
    path = tmp_path / "bm25.sqlite"
    with monkeypatch.context() as old:
        old.setattr(analyzer, "STOPWORDS", analyzer.ENGLISH_STOPWORDS)
        old.setattr(bm25_module, "TOKENIZER_VERSION", "3")
        with BM25Index(path) as ix:
            ix.upsert(
                ["where", "apply"],
                ["collections.Where filters a slice", "collections.Apply applies a function"],
            )
            assert ix.search("where", 3) == []
    with BM25Index(path) as ix:
        assert [h[0] for h in ix.search("where", 3)] == ["where"]


def test_equal_scores_are_ranked_by_id_whatever_the_insertion_order(tmp_path):
    # Same documents, inserted in opposite orders (a fresh index vs an updated one): ties at
    # the cut of k must be decided by id, so both return the same ranking.
    ids = [f"doc-{i:02d}" for i in range(30)]
    texts = ["alpha bravo"] * 30  # every document scores the same for "alpha"
    metas = [{"repository": "r"}] * 30
    forward, backward = BM25Index(tmp_path / "f.sqlite"), BM25Index(tmp_path / "b.sqlite")
    forward.upsert(ids, texts, metas)
    backward.upsert(ids[::-1], texts[::-1], metas)
    for k in (1, 5, 10):
        want = ids[:k]
        assert [d for d, _ in forward.search("alpha", k)] == want
        assert [d for d, _ in backward.search("alpha", k)] == want
        assert [d for d, _ in backward.search("alpha", k, {"repository": "r"})] == want
    forward.close()
    backward.close()
