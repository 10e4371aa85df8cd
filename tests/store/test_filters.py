from __future__ import annotations

import chromadb
import pytest
from chromadb.api.types import validate_where

from hetriever.core.errors import InvalidFilterError
from hetriever.store.filters import and_filters, equality_terms, matches, validate_filter

# Metadata shaped like chunk metadata, with the awkward cases: missing keys, int vs float,
# bools, list fields of each type, and an item with no metadata at all.
METADATA: dict[str, dict | None] = {
    "a": {
        "repository": "hugo-docs",
        "section": "functions",
        "chunk_index": 0,
        "score": 1.5,
        "has_code": True,
        "tags": ["go", "templates"],
    },
    "b": {
        "repository": "hugo-docs",
        "section": "methods",
        "chunk_index": 2,
        "score": 2.0,
        "has_code": False,
        "tags": ["go"],
    },
    "c": {"repository": "hugo-docs", "section": "functions", "chunk_index": 3},
    "d": {"repository": "otel", "title": "Collector"},
    "e": {
        "repository": "otel",
        "section": "docs",
        "chunk_index": 2.0,
        "tags": ["x", "templates"],
        "nums": [1, 2, 3],
        "floats": [1.5, 2.0],
        "flags": [True],
    },
    "f": {"repository": "otel", "section": "Functions", "chunk_index": True},
    "g": None,
}

FILTERS = [
    {"section": "functions"},
    {"section": {"$eq": "functions"}},
    {"section": {"$ne": "functions"}},
    {"chunk_index": 2},
    {"chunk_index": 2.0},
    {"chunk_index": {"$ne": 2}},
    {"chunk_index": {"$gt": 1}},
    {"chunk_index": {"$gte": 1.5}},
    {"chunk_index": {"$lt": 3}},
    {"chunk_index": {"$lte": 2.0}},
    {"chunk_index": True},
    {"chunk_index": {"$ne": True}},
    {"has_code": True},
    {"has_code": {"$ne": True}},
    {"score": 2},
    {"score": {"$in": [2]}},
    {"chunk_index": {"$in": [1, 2]}},
    {"chunk_index": {"$nin": [1, 2]}},
    {"chunk_index": {"$in": [True]}},
    {"section": {"$in": ["functions", "docs"]}},
    {"section": {"$nin": ["functions", "methods"]}},
    {"tags": {"$contains": "go"}},
    {"tags": {"$not_contains": "go"}},
    {"tags": "go"},
    {"tags": {"$ne": "go"}},
    {"tags": {"$in": ["go"]}},
    {"tags": {"$nin": ["go"]}},
    {"section": {"$contains": "functions"}},
    {"section": {"$not_contains": "functions"}},
    {"nums": {"$contains": 2}},
    {"nums": {"$contains": 2.0}},
    {"floats": {"$contains": 2}},
    {"flags": {"$contains": True}},
    {"nums": {"$gt": 2}},
    {"section": {"$gt": 1}},
    {"missing": {"$ne": "x"}},
    {"missing": {"$nin": ["x"]}},
    {"missing": "x"},
    {"repository": "hugo-docs", "section": "functions"},
    {"$or": [{"section": "docs"}, {"chunk_index": 0}]},
    {
        "$and": [
            {"repository": "otel"},
            {"$or": [{"tags": {"$contains": "x"}}, {"title": "Collector"}]},
        ]
    },
    {"$and": [{"section": "functions"}]},
    {"chunk_index": {"$gt": 0, "$lt": 3}},
]


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    client = chromadb.PersistentClient(path=str(tmp_path_factory.mktemp("chroma")))
    col = client.create_collection("filters-test", embedding_function=None)
    ids = list(METADATA)
    col.add(
        ids=ids,
        embeddings=[[float(i), 1.0] for i in range(len(ids))],
        metadatas=[METADATA[i] for i in ids],
        documents=[f"doc {i}" for i in ids],
    )
    return col


@pytest.mark.parametrize("where", FILTERS, ids=[str(f) for f in FILTERS])
def test_matches_agrees_with_chroma(collection, where):
    normalised = validate_filter(where)
    validate_where(normalised)  # Chroma accepts exactly what we return
    expected = set(collection.get(where=normalised)["ids"])
    ours = {doc_id for doc_id, meta in METADATA.items() if matches(normalised, meta)}
    assert ours == expected


def test_missing_key_semantics():
    # Chroma: negative operators match items without the key; everything else does not.
    f = validate_filter({"section": {"$ne": "x"}})
    assert matches(f, {}) is True
    assert matches(validate_filter({"section": {"$nin": ["x"]}}), {"a": 1}) is True
    assert matches(validate_filter({"section": "x"}), {}) is False
    assert matches(validate_filter({"n": {"$gt": 0}}), {}) is False


def test_normalisation():
    assert validate_filter(None) is None
    assert validate_filter({}) is None
    assert validate_filter({"a": 1}) == {"a": {"$eq": 1}}
    assert validate_filter({"a": 1, "b": "x"}) == {"$and": [{"a": {"$eq": 1}}, {"b": {"$eq": "x"}}]}
    assert validate_filter({"$or": [{"a": 1}]}) == {"a": {"$eq": 1}}
    assert validate_filter({"n": {"$gte": 1, "$lt": 5}}) == {
        "$and": [{"n": {"$gte": 1}}, {"n": {"$lt": 5}}]
    }
    nested = validate_filter({"$and": [{"a": 1, "b": 2}, {"$or": [{"c": {"$in": ["x", "y"]}}]}]})
    assert nested == {
        "$and": [{"$and": [{"a": {"$eq": 1}}, {"b": {"$eq": 2}}]}, {"c": {"$in": ["x", "y"]}}]
    }
    validate_where(nested)


@pytest.mark.parametrize(
    "where, fragment",
    [
        ({"a": None}, "got NoneType"),
        ({"a": {"$regex": "x"}}, "unknown operator '$regex'"),
        ({"$not": [{"a": 1}]}, "unknown operator '$not'"),
        ({"a": {"$in": []}}, "non-empty list"),
        ({"a": {"$in": [1, "x"]}}, "mixes types"),
        ({"a": {"$in": [1, 2.0]}}, "mixes types"),
        ({"a": {"$in": "x"}}, "non-empty list"),
        ({"a": {"$gt": "b"}}, "int or float"),
        ({"a": {"$gt": True}}, "int or float"),
        ({"a": {"b": 1}}, "unknown operator 'b'"),
        ({"a": {}}, "empty operator dict"),
        ({"a": ["x"]}, "got list"),
        ({"a": {"$eq": {"b": 1}}}, "got dict"),
        ({"a": float("nan")}, "finite"),
        ({"": 1}, "non-empty strings"),
        ({1: 1}, "non-empty strings"),
        ({"#document": {"$contains": "x"}}, "reserved"),
        ({"$and": []}, "non-empty list"),
        ({"$and": {"a": 1}}, "non-empty list"),
        ({"$and": [{}, {"a": 1}]}, "empty dict"),
        ("section=functions", "expected a dict"),
    ],
)
def test_invalid_filters_are_rejected_with_a_helpful_message(where, fragment):
    with pytest.raises(InvalidFilterError) as info:
        validate_filter(where)
    assert fragment in str(info.value)
    assert "$eq" in str(info.value)  # the message lists the allowed operators


def test_depth_and_size_limits():
    deep: dict = {"a": 1}
    for i in range(9):
        deep = {"$or": [deep, {f"k{i}": i}]}
    with pytest.raises(InvalidFilterError, match="deeper than 8"):
        validate_filter(deep)
    ok: dict = {"a": 1}
    for i in range(7):
        ok = {"$or": [ok, {f"k{i}": i}]}
    validate_where(validate_filter(ok))
    with pytest.raises(InvalidFilterError, match="more than 100 clauses"):
        validate_filter({f"k{i}": i for i in range(101)})
    assert validate_filter({f"k{i}": i for i in range(100)}) is not None


def test_and_filters_only_narrows_the_scope():
    scope = {"repository": "hugo-docs"}
    assert and_filters(None, None) is None
    assert and_filters(scope, None) == {"repository": {"$eq": "hugo-docs"}}
    # A caller's $or cannot escape the scope: every result must still satisfy it.
    widened = and_filters(scope, {"$or": [{"repository": "otel"}, {"section": "docs"}]})
    validate_where(widened)
    hits = {i for i, m in METADATA.items() if matches(widened, m)}
    assert hits == set()
    combined = and_filters({"a": 1, "b": 2}, {"c": 3})
    assert combined == {"$and": [{"a": {"$eq": 1}}, {"b": {"$eq": 2}}, {"c": {"$eq": 3}}]}
    with pytest.raises(InvalidFilterError):
        and_filters(scope, {"a": {"$bad": 1}})


def test_equality_terms_for_index_narrowing():
    assert equality_terms(validate_filter({"file_path": "a.md"})) == [("file_path", ["a.md"])]
    f = validate_filter({"repository": "r", "section": {"$in": ["x", "y"]}, "n": {"$gt": 1}})
    assert equality_terms(f) == [("repository", ["r"]), ("section", ["x", "y"])]
    assert equality_terms(validate_filter({"$or": [{"a": 1}, {"b": 2}]})) is None
    assert equality_terms(validate_filter({"a": {"$ne": 1}})) is None
