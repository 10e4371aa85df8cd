"""Bad input end to end: each gets a clear error or a logged skip, never a crash of the whole run,
and nothing outside a repository is ever read into the index.

Unit-level rules (filter validation, front matter parsing, blob decoding, webhook signatures)
are asserted in their own modules; here the same inputs go through the real entry points: an
index run over one repository full of bad files, the CLI, hybrid search and the webhook app.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import uuid

import httpx
import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetriever.cli import main as cli_main
from hetriever.core.errors import InvalidFilterError, InvalidLimitError
from hetriever.core.names import content_hash
from hetriever.discover.repositories import discover_repositories
from hetriever.index.indexing import index_repository
from hetriever.search.hybrid import hybrid_search
from hetriever.search.request import SearchRequest
from hetriever.store.filters import FIELD_OPS, matches, validate_filter
from hetriever.store.knowledge_store import Store, clear_store_cache
from tests.support.chroma_fixtures import make_chunk, store_settings
from tests.support.flow_support import stored
from tests.support.helpers import commit_all, init_repo, write_files
from tests.support.webhook_support import (
    SECRET,
    closed_port,
    push_payload,
    running,
    send,
    webhook_config,
)

REPO = "messy-docs"
SECRET_TOKEN = "TOPSECRET" + uuid.uuid4().hex  # must never reach the index


def run(coro):
    return asyncio.run(coro)


# --- one repository full of bad files --------------------------------------------------------


def _page(title: str, body: str) -> str:
    return f"---\ntitle: {title}\n---\n\n{body}\n"


@pytest.fixture(scope="module")
def messy(tmp_path_factory):
    """A repo with every kind of bad file, plus secrets outside it that links point at."""
    root = tmp_path_factory.mktemp("messy")
    (root / "secret.md").write_text(_page("Secret", f"{SECRET_TOKEN} outside file"))
    outside = root / "outside"
    outside.mkdir()
    (outside / "inner.md").write_text(_page("Inner", f"{SECRET_TOKEN} outside dir"))
    repo = init_repo(root / "docs" / REPO)
    d = "content/docs/"
    write_files(
        repo,
        {
            d + "good.md": _page("Good", "A perfectly ordinary page about goodword templates."),
            d + "bad-yaml.md": "---\ntitle: [unclosed\n  - : :\n---\n\nyamlbody survives.\n",
            d + "bad-toml.md": "+++\ntitle = \nx = [1,\n+++\n\ntomlbody survives.\n",
            d + "tags-int.md": "---\ntitle: Tags\ntags: 5\n---\n\ntagsbody words here.\n",
            d + "huge-fm.md": (
                "---\ntitle: Huge\ndescription: "
                + "word " * 40_000
                + "\nkeywords: ["
                + ", ".join(f"k{i}" for i in range(3000))
                + "]\n---\n\nhugebody.\n"
            ),
            d + "binary.md": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)),
            d + "latin1.md": "---\ntitle: Caf\xe9\n---\n\nlatinbody caf\xe9.\n".encode("latin-1"),
            d + "bom.md": b"\xef\xbb\xbf" + _page("Bom", "bombody text.").encode(),
            d + "crlf.md": _page("Crlf", "crlfbody line one.\n\nline two.").replace("\n", "\r\n"),
            d + "oneline.md": "x" * (10 * 1024 * 1024),
            d + "..dots.md": _page("Dots", "dotsbody: a name that starts with two dots."),
            d + "quote'\";.md": _page("Quote", "quotebody: a name with quotes and a semicolon."),
            d + "control.md": _page("Control", "ctrlbody \x1b[31mred\x1b[0m \x07 bell \x0c feed."),
            d + "shortcodes.md": _page("Short", "shortbody " + "{{< " * 300 + " {{% x %}} ```"),
            d + "includes.md": _page(
                "Includes",
                "includebody\n\n"
                '{{% include "../../../secret" %}}\n\n'
                '{{% include "/../../secret.md" %}}\n\n'
                '{{< include "../../outside/inner.md" >}}\n\n'
                '{{< readfile file="../../../secret.md" >}}',
            ),
        },
    )
    links = {
        "leak-abs.md": str(root / "secret.md"),
        "leak-rel.md": "../../../../secret.md",
        "leak-dir": str(outside),
        "leak-loop.md": "leak-loop.md",
    }
    for name, target in links.items():
        os.symlink(target, repo / d / name)
    commit_all(repo, "messy")
    return root, repo


@pytest.fixture(scope="module")
def messy_index(messy, minilm_embedder, tmp_path_factory):
    root, repo = messy
    (repository,) = discover_repositories(root / "docs")
    store = Store(store_settings(tmp_path_factory.mktemp("messy-store")), embedder=minilm_embedder)
    result = run(index_repository(repository, store, store.settings))
    yield store, result
    store.close_sync()


def test_a_run_over_bad_files_completes_and_says_why_each_was_skipped(messy_index):
    store, result = messy_index
    assert result.completed and not result.failed
    reasons = {s.path.rsplit("/", 1)[-1]: s.reason for s in result.skipped}
    assert reasons["binary.md"].startswith("binary file")
    assert reasons["latin1.md"].startswith("not valid UTF-8")
    assert reasons["oneline.md"].startswith("too large")
    for link in ("leak-abs.md", "leak-rel.md", "leak-loop.md"):
        assert link in reasons, reasons
    texts = " ".join(t for _, t in stored(store, REPO).values())
    for word in (
        "goodword",
        "yamlbody",
        "tomlbody",
        "tagsbody",
        "hugebody",
        "bombody",
        "crlfbody",
        "dotsbody",
        "quotebody",
        "ctrlbody",
        "shortbody",
        "includebody",
    ):
        assert word in texts, word  # bad front matter or markup never costs the body
    assert "\r" not in texts and "\ufeff" not in texts


def test_nothing_outside_the_repository_reaches_the_index(messy, messy_index):
    root, _ = messy
    store, _ = messy_index
    col = store.chroma.client.get_collection(store.physical_name(REPO))
    got = col.get(include=["documents", "metadatas"])
    blob = json.dumps([got["documents"], got["metadatas"]])
    assert SECRET_TOKEN not in blob
    assert all(
        SECRET_TOKEN not in text
        for text, _ in (store.bm25(REPO).get(i) for i in store.bm25(REPO).ids())
    )
    assert not any(
        "leak" in m["file_path"] or "outside" in m["file_path"] for m in got["metadatas"]
    )
    # and search cannot find it either
    result = hybrid_search(store, SearchRequest(SECRET_TOKEN, top_k=20))
    assert all(SECRET_TOKEN not in m.content for m in result.matches)


def test_bad_front_matter_metadata_is_chroma_valid(messy_index):
    store, _ = messy_index
    got = store.chroma.client.get_collection(store.physical_name(REPO)).get(include=["metadatas"])
    by_file = {m["file_path"].rsplit("/", 1)[-1]: m for m in got["metadatas"]}
    assert isinstance(by_file["tags-int.md"]["tags"], list)
    assert by_file["bad-yaml.md"]["title"]  # a title is still derived


# --- the CLI -------------------------------------------------------------------------------------


@pytest.fixture
def cli_env(tmp_path, monkeypatch, minilm_model_dir, capsys):
    monkeypatch.chdir(tmp_path)
    for key in [k for k in os.environ if k.startswith("HETRIEVER_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HETRIEVER_SEARCH_RESIDENT_IDLE", "0")  # no resident search process
    monkeypatch.setenv("HETRIEVER_CHROMA_PATH", str(tmp_path / "chroma"))
    monkeypatch.setenv("HETRIEVER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HETRIEVER_MODEL_DIR", str(minilm_model_dir))
    clear_store_cache()
    yield tmp_path
    clear_store_cache()
    # the CLI pointed the log at capsys's stream, which closes after the test
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=sys.__stderr__))


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("hetriever: error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["search", "-r", "B_!", "q"], "invalid collection name"),
        (["search", "-r", "x" * 70, "q"], "invalid collection name"),
        (["search", "--filter", "{not json", "q"], "not valid JSON"),
        (["search", "--filter", '{"$where": "sleep(1000)"}', "q"], "unknown operator '$where'"),
        (["search", "--filter", '{"section": {"$regex": ".*"}}', "q"], "unknown operator '$regex'"),
        (["search", "--filter", '{"chunk_index": {"$gt": "1"}}', "q"], "int or float"),
        (["search", "--filter", '["section"]', "q"], "expected a dict"),
        (["search", "-k", "100000", "q"], "above the maximum"),
    ],
)
def test_cli_bad_search_arguments_are_one_clear_line(cli_env, capsys, argv, fragment):
    code, out, err = _cli(capsys, *argv)
    assert code == 2 and out == ""
    assert fragment in _one_error_line(err)


def test_cli_gitmodules_outside_the_parent_and_unknown_names(cli_env, capsys, messy):
    root, _ = messy
    parent = init_repo(cli_env / "parent")
    (parent / ".gitmodules").write_text(
        f'[submodule "evil"]\n\tpath = ../{root.name}/docs/{REPO}\n\turl = {root}\n'
    )
    commit_all(parent, "evil submodule")
    code, out, err = _cli(capsys, "--docs-root", str(parent), "ingest", "--json")
    (outcome,) = json.loads(out)  # reported for that repository alone (exit 1), no traceback
    assert code == 1 and not outcome["ok"] and "Traceback" not in err
    assert "outside the parent repository" in outcome["error"]

    code, _, err = _cli(capsys, "--docs-root", str(root / "docs"), "ingest", "-r", "nope-docs")
    assert code == 2 and "unknown repositories: nope-docs" in _one_error_line(err)


@pytest.mark.parametrize("depth", [40, 60_000])
def test_cli_deeply_nested_filter_is_one_clear_line(cli_env, capsys, depth):
    nested = "[" * depth + "]" * depth
    code, _, err = _cli(capsys, "search", "--filter", f'{{"$and": {nested}}}', "q")
    assert code == 2 and "nested more than 32 levels" in _one_error_line(err)
    assert "Traceback" not in err


# --- search queries and limits ------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "",
        "   \n\t ",
        "\x00\x01\x02",
        "\x1b[2J\x1b[H clear screen",
        "'; DROP TABLE embeddings; --",
        '{"$where": "this.a > 1"}',
        "' OR '1'='1",
        "ordinary \u202e reversed \ufeff text",
        "🙂" * 500,
        "a" * 100_000,
        "templates " * 10_000,
    ],
)
def test_odd_queries_never_raise_and_never_change_the_index(messy_index, query):
    store, _ = messy_index
    before = run(store.count(REPO))
    for hybrid in (True, False):
        result = hybrid_search(store, SearchRequest(query, top_k=5, hybrid=hybrid))
        assert len(result.matches) <= 5
        for m in result.matches:
            assert content_hash(m.content) == m.metadata["content_hash"]
    assert run(store.count(REPO)) == before


@pytest.mark.parametrize("top_k, expected", [(None, 5), (0, 5), (-3, 5), (1, 1), (100, 100)])
def test_limits_are_clamped_to_defaults(messy_index, top_k, expected):
    store, _ = messy_index
    result = hybrid_search(store, SearchRequest("page", top_k=top_k))
    assert len(result.matches) <= expected


@pytest.mark.parametrize("top_k", [101, 10**9, 2.5, "5", True])
def test_bad_limits_are_refused(messy_index, top_k):
    store, _ = messy_index
    with pytest.raises(InvalidLimitError):
        hybrid_search(store, SearchRequest("page", top_k=top_k))


# --- namespace isolation under any filter ---------------------------------------------------------

A, B = "alpha-docs", "beta-docs"
SECTIONS = ["functions", "install", "collector"]


def _iso_chunks() -> list:
    chunks = []
    for repo in (A, B):
        for i in range(12):
            section = SECTIONS[i % 3]
            text = (
                f"{repo} page {i} about {section}: shared words templates install collector "
                f"receivers where filter {'code' if i % 2 else 'prose'}"
            )
            chunks.append(
                make_chunk(
                    repo,
                    f"content/{section}/p{i}.md",
                    text,
                    index=i % 4,
                    tags=[section, f"t{i % 5}"],
                    access_level="PUBLIC",
                )
            )
    return chunks


@pytest.fixture(scope="module")
def iso_store(tmp_path_factory, minilm_embedder):
    store = Store(store_settings(tmp_path_factory.mktemp("isolation")), embedder=minilm_embedder)
    for chunk in _iso_chunks():
        run(store.upsert_file_chunks(chunk.repository, chunk.file_path, [chunk]))
    yield store
    store.close_sync()


KEYS = [
    "repository",
    "section",
    "tags",
    "chunk_index",
    "has_code",
    "file_path",
    "title",
    "access_level",
    "missing_key",
    "$and",
    "#document",
]
SCALARS = st.one_of(
    st.sampled_from([A, B, "functions", "install", "t1", "PUBLIC", "x"]),
    st.integers(-2, 5),
    st.booleans(),
    st.floats(allow_nan=True),
    st.none(),
    st.text(max_size=5),
)
OPERANDS = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=3),
    st.dictionaries(st.text(max_size=3), SCALARS, max_size=1),
)
LEAVES = st.one_of(
    st.builds(lambda k, v: {k: v}, st.sampled_from(KEYS), SCALARS),
    st.builds(
        lambda k, op, v: {k: {op: v}},
        st.sampled_from(KEYS),
        st.sampled_from(list(FIELD_OPS) + ["$regex", "$where", "$not", "eq"]),
        OPERANDS,
    ),
)
FILTERS = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.builds(
            lambda op, items: {op: items},
            st.sampled_from(["$and", "$or", "$nor"]),
            st.lists(inner, max_size=3),
        ),
        st.dictionaries(st.sampled_from(KEYS), SCALARS, min_size=2, max_size=3),
    ),
    max_leaves=6,
)


@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(where=FILTERS, hybrid=st.booleans())
def test_a_search_scoped_to_a_never_returns_b_under_any_filter(iso_store, where, hybrid):
    try:
        normalised = validate_filter(where)
    except InvalidFilterError:
        with pytest.raises(InvalidFilterError):
            hybrid_search(
                iso_store,
                SearchRequest(
                    "templates install collector", filters=where, repositories=[A], hybrid=hybrid
                ),
            )
        return
    result = hybrid_search(
        iso_store,
        SearchRequest(
            "templates install collector", top_k=30, filters=where, repositories=[A], hybrid=hybrid
        ),
    )
    allowed = {c.id for c in _iso_chunks() if c.repository == A and matches(normalised, c.metadata)}
    for m in result.matches:
        assert m.metadata["repository"] == A
        assert m.doc_id in allowed  # the filter narrowed, never widened


# --- webhook: what tests/webhooks/test_webhook.py does not send ------------------------------------------


@pytest.fixture(scope="module")
def webhook(tmp_path_factory):
    """The app with a closed Prefect port: nothing here may get as far as starting a run."""
    state = tmp_path_factory.mktemp("webhook-bad-input")
    with running(webhook_config(state, f"http://127.0.0.1:{closed_port()}/api")) as base:
        yield base


def test_signed_but_pathological_bodies_are_400_not_500(webhook):
    for raw in (
        b"\xff\xfe\x00{not utf-8",
        b"[" * 30_000 + b"]" * 30_000,
        b'{"a": ' * 5_000 + b"1" + b"}" * 5_000,
        b"null",
        b'"just a string"',
    ):
        resp = send(webhook, raw=raw)
        assert resp.status_code == 400, (raw[:20], resp.status_code, resp.text[:200])
        assert resp.json()["status"] == "error"


def test_tampered_replay_of_a_signed_delivery_is_401(webhook):
    delivery = str(uuid.uuid4())
    body = json.dumps(push_payload(full_name="someone/elsewhere")).encode()
    first = send(webhook, raw=body, delivery=delivery)
    assert first.status_code == 202  # accepted (and ignored: not a configured repository)
    tampered = body.replace(b"someone/elsewhere", b"gohugoio/hugoDocs")
    replay = send(
        webhook,
        raw=tampered,
        delivery=delivery,
        signature=first.request.headers["X-Hub-Signature-256"],
    )
    assert replay.status_code == 401


def test_signed_push_without_delivery_id_is_400(webhook):
    body = json.dumps(push_payload()).encode()
    resp = httpx.post(
        f"{webhook}/webhook",
        content=body,
        timeout=30,
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "push",
            "X-Hub-Signature-256": send.__globals__["signature_for"](SECRET, body),
        },
    )
    assert resp.status_code == 400 and "X-GitHub-Delivery" in resp.json()["error"]


def test_bad_content_length_and_methods(webhook):
    host, port = webhook.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: lots\r\nConnection: close\r\n\r\n{}"
        )
        status_line = sock.recv(4096).split(b"\r\n", 1)[0]
    assert status_line.split()[1] in (b"400", b"413")  # refused by the server or by the app
    assert httpx.get(f"{webhook}/webhook").status_code == 405
    assert httpx.post(f"{webhook}/healthz").status_code == 405
