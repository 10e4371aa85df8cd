"""Access levels in search, both layers, against real embedded Chroma, BM25 and the model."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from structlog.testing import capture_logs

import hetriever.core.access as access
from hetriever.core.errors import InvalidFilterError
from hetriever.search.hybrid import retrieve
from hetriever.search.planning import plan_collections
from hetriever.search.request import SearchRequest
from tests.support.chroma_fixtures import make_chunk

PUB, PRIV, TEAM = "public-docs", "private-docs", "team-docs"
LEVELS = {PRIV: "PRIVATE", TEAM: "TEAM"}
# One distinctive word per document, so every query has one right answer.
DOCS = [
    (PUB, "content/a.md", "Zebra crossings are explained in the public handbook."),
    (PUB, "content/b.md", "Install the public command line tool with the package manager."),
    (PRIV, "content/secret.md", "Zebra salaries and the private payroll schedule."),
    (PRIV, "content/keys.md", "Rotate the private signing keys every quarter."),
    (TEAM, "content/oncall.md", "Zebra on-call rotation for the team."),
]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def populate(store: Any, docs=DOCS) -> Any:
    for repo, path, text in docs:
        level = LEVELS.get(repo, "PUBLIC")
        run(
            store.upsert_file_chunks(repo, path, [make_chunk(repo, path, text, access_level=level)])
        )
    return store


@pytest.fixture
def store(make_store, chroma_backend):
    if chroma_backend != "embedded":
        pytest.skip("the access layers are backend-independent; embedded is enough")
    return populate(make_store(access_levels=LEVELS))


def repos(result) -> set[str]:
    return {m.metadata["repository"] for m in result.matches}


def test_default_caller_sees_public_only(store) -> None:
    result = run(retrieve(store, SearchRequest("zebra", top_k=10)))
    assert repos(result) == {PUB}
    both = run(
        retrieve(store, SearchRequest("zebra", top_k=10, access_levels=["PUBLIC", "PRIVATE"]))
    )
    assert repos(both) == {PUB, PRIV}
    # levels are a set, not a ladder: PRIVATE alone does not include TEAM or PUBLIC
    assert repos(
        run(retrieve(store, SearchRequest("zebra", top_k=10, access_levels="PRIVATE")))
    ) == {PRIV}
    assert repos(
        run(
            retrieve(
                store, SearchRequest("zebra", top_k=10, access_levels=["PUBLIC", "TEAM", "PRIVATE"])
            )
        )
    ) == {PUB, PRIV, TEAM}


@pytest.mark.parametrize(
    "where",
    [
        {"access_level": "PRIVATE"},
        {"$or": [{"access_level": "PRIVATE"}, {"access_level": "PUBLIC"}]},
        {"$or": [{"repository": PRIV}, {"access_level": {"$ne": "x"}}]},
        {"access_level": {"$in": ["PRIVATE", "SYSTEM", "TEAM"]}},
    ],
)
def test_forged_filters_cannot_widen_access(store, where) -> None:
    for namespaces in (None, [PRIV], [PRIV, PUB]):
        result = run(
            retrieve(
                store,
                SearchRequest(
                    "zebra salaries private payroll",
                    top_k=10,
                    filters=where,
                    repositories=namespaces,
                ),
            )
        )
        assert all(m.metadata["access_level"] == "PUBLIC" for m in result.matches), where
        assert PRIV not in repos(result)


def test_unknown_access_level_is_an_error(store) -> None:
    with pytest.raises(InvalidFilterError, match="unknown access level"):
        run(retrieve(store, SearchRequest("zebra", access_levels=["ROOT"])))


def test_homogeneous_collections_get_no_chunk_filter(store) -> None:
    plan = access.CollectionPlan(
        PUB,
        store.physical_name(PUB),
        "PUBLIC",
        set(store.catalog.collection(store.physical_name(PUB)).levels),
    )
    assert not plan.mixed and plan.where(frozenset({"PUBLIC"})) is None


@pytest.fixture
def mixed_store(make_store, chroma_backend):
    """A PUBLIC repository holding one chunk marked PRIVATE (e.g. written by hand)."""
    if chroma_backend != "embedded":
        pytest.skip("embedded is enough")
    store = populate(make_store())
    text = "Walrus budget figures for the private board meeting."
    run(
        store.upsert_file_chunks(
            PUB,
            "content/board.md",
            [make_chunk(PUB, "content/board.md", text, access_level="PRIVATE")],
        )
    )
    return store


def test_mixed_collection_store_side_filter_alone(mixed_store, monkeypatch) -> None:
    # Layer 2 switched off: only the query-side filter stands between the caller and the chunk.
    monkeypatch.setattr("hetriever.search.candidates.denial", lambda plan, meta, allowed: None)
    plan = plan_collections(mixed_store, [PUB])[PUB]
    assert plan.mixed and plan.where(frozenset({"PUBLIC"})) == {"access_level": {"$in": ["PUBLIC"]}}
    for where in (
        None,
        {"access_level": "PRIVATE"},
        {"$or": [{"access_level": "PRIVATE"}, {"file_path": "content/board.md"}]},
    ):
        result = run(
            retrieve(
                mixed_store, SearchRequest("walrus budget board meeting", top_k=10, filters=where)
            )
        )
        assert "content/board.md" not in {m.metadata["file_path"] for m in result.matches}
    allowed = run(
        retrieve(
            mixed_store,
            SearchRequest(
                "walrus budget board meeting", top_k=10, access_levels=["PUBLIC", "PRIVATE"]
            ),
        )
    )
    assert allowed.matches[0].metadata["file_path"] == "content/board.md"


def test_mixed_collection_python_check_alone(mixed_store, monkeypatch) -> None:
    # Layer 1 switched off (a bug that forgets the chunk filter): the Python check still drops it.
    monkeypatch.setattr(access.CollectionPlan, "where", lambda self, allowed: None)
    with capture_logs() as logs:
        result = run(retrieve(mixed_store, SearchRequest("walrus budget board meeting", top_k=10)))
    assert "content/board.md" not in {m.metadata["file_path"] for m in result.matches}
    assert any(
        e["event"] == "result_access_denied" and e["reason"] == "chunk level PRIVATE" for e in logs
    )


def test_chunk_claiming_public_inside_a_private_collection(
    make_store, chroma_backend, monkeypatch
) -> None:
    if chroma_backend != "embedded":
        pytest.skip("embedded is enough")
    store = populate(make_store(access_levels=LEVELS))
    text = "Narwhal migration notes, mislabelled as public."
    run(
        store.upsert_file_chunks(
            PRIV,
            "content/liar.md",
            [make_chunk(PRIV, "content/liar.md", text, access_level="PUBLIC")],
        )
    )
    # The collection's declared level governs: a PUBLIC caller never queries it.
    assert PRIV not in repos(run(retrieve(store, SearchRequest("narwhal migration", top_k=10))))
    # Even if the collection were queried by mistake, the declared level is checked per result.
    monkeypatch.setattr(access.CollectionPlan, "visible", lambda self, allowed: True)
    with capture_logs() as logs:
        result = run(retrieve(store, SearchRequest("narwhal migration", top_k=10)))
    assert PRIV not in repos(result)
    assert any(
        e["event"] == "result_access_denied" and e["reason"] == "collection level PRIVATE"
        for e in logs
    )
    # A caller with PRIVATE only does not get it either: its own claim (PUBLIC) is not theirs.
    monkeypatch.undo()
    result = run(
        retrieve(store, SearchRequest("narwhal migration", top_k=10, access_levels=["PRIVATE"]))
    )
    assert "content/liar.md" not in {m.metadata["file_path"] for m in result.matches}
    both = run(
        retrieve(
            store, SearchRequest("narwhal migration", top_k=10, access_levels=["PRIVATE", "PUBLIC"])
        )
    )
    assert both.matches[0].metadata["file_path"] == "content/liar.md"


def test_level_changed_in_config_hides_the_collection_at_once(make_store, chroma_backend) -> None:
    if chroma_backend != "embedded":
        pytest.skip("embedded is enough")
    populate(make_store())  # everything indexed as PUBLIC
    now_private = make_store(access_levels={PUB: "PRIVATE"})
    assert PUB not in repos(
        run(retrieve(now_private, SearchRequest("zebra crossings handbook", top_k=10)))
    )
