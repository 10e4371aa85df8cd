"""The serving edges' pure logic: key files, page grouping and passages, budgets, the cap."""

from __future__ import annotations

import subprocess
import sys
import threading

import anyio
import pytest

from hetriever.core.config import load_settings
from hetriever.core.errors import ConfigurationError
from hetriever.core.models import SearchResult
from hetriever.search import published
from hetriever.serve import pages
from hetriever.serve.keys import InvalidKeyError, KeyRing, hash_key, key_from_headers, new_key
from hetriever.serve.mcp_server import clip
from hetriever.serve.service import Busy, DocsService, Limits, RequestError


def ring(text: str) -> KeyRing:
    return KeyRing.parse(text, "test keys")


def test_keys_grant_their_levels_plus_public_and_nothing_without_a_match():
    keys = ring(f"team {hash_key('k1')} TEAM\nboth {hash_key('k2')} team,private # comment\n")
    assert keys.levels(None) == {"PUBLIC"} and keys.levels("") == {"PUBLIC"}
    assert keys.levels("k1") == {"PUBLIC", "TEAM"}
    assert keys.levels("k2") == {"PUBLIC", "TEAM", "PRIVATE"}
    for bad in ("k3", "K1", "k1 ", "x" * 1000):
        with pytest.raises(InvalidKeyError):
            keys.levels(bad)
    assert keys.name("k2") == "both"


@pytest.mark.parametrize(
    "line,message",
    [
        (f"root {hash_key('k')} SYSTEM", "cannot grant SYSTEM"),
        (f"team {hash_key('k')} TEAM,ADMIN", "cannot grant ADMIN"),
        ("team k1 TEAM", "sha256"),
        (f"team {hash_key('k')}", "expected"),
        (f"team {hash_key('k')} ,", "no level"),
    ],
)
def test_bad_key_lines_stop_the_start_with_one_line(line, message):
    with pytest.raises(ConfigurationError, match=message):
        ring(line)


def test_keys_from_env_and_file(tmp_path):
    path = tmp_path / "keys"
    path.write_text(f"a {hash_key('from-file')} TEAM\n")
    keys = KeyRing.from_env(
        {
            "HETRIEVER_API_KEYS": f"b {hash_key('from-env')} PRIVATE",
            "HETRIEVER_API_KEYS_FILE": str(path),
        }
    )
    assert keys.levels("from-file") == {"PUBLIC", "TEAM"}
    assert keys.levels("from-env") == {"PUBLIC", "PRIVATE"}
    with pytest.raises(ConfigurationError, match="cannot read"):
        KeyRing.from_env({"HETRIEVER_API_KEYS_FILE": str(tmp_path / "missing")})


def test_new_key_round_trips_and_is_stored_only_hashed():
    key, line = new_key("team")
    assert key not in line and line.split()[2] == "TEAM"
    assert ring(line).levels(key) == {"PUBLIC", "TEAM"}
    with pytest.raises(ConfigurationError):
        new_key("SYSTEM")


def test_key_headers():
    assert key_from_headers({}) is None
    assert key_from_headers({"authorization": "Bearer abc"}) == "abc"
    assert key_from_headers({"x-api-key": " abc "}) == "abc"
    for bad in ("Basic abc", "Bearer ", "abc"):
        with pytest.raises(InvalidKeyError):
            key_from_headers({"authorization": bad})


def match(repo: str, path: str, doc_id: str, score: float) -> SearchResult:
    return SearchResult(
        doc_id=doc_id,
        content="x",
        score=score,
        source="hybrid",
        metadata={"repository": repo, "file_path": path},
    )


def test_a_page_result_shows_its_next_passages():
    page = match("a", "p.md", "1", 0.9)
    page.metadata["title"] = "P"
    page.passages = [{"doc_id": "2", "heading_context": "Usage", "content": "P > Usage\n\nUse it."}]
    view = pages.match_view(page)
    assert view["more"] == [{"chunk_id": "2", "heading": "Usage", "passage": "Use it."}]


def test_passage_drops_only_the_title_line_the_chunker_added():
    meta = {"title": "where", "heading_context": "Usage > Examples"}
    assert pages.passage("where > Usage > Examples\n\nBody.", meta) == "Body."
    assert pages.passage("Body first.\n\nMore.", meta) == "Body first.\n\nMore."
    assert pages.passage("T\n\nBody.", {"title": "T"}) == "Body."
    # a page record: its title line, then what the page says about itself
    assert pages.passage("T\nWhat it is for.", {"title": "T", "page_record": True}) == (
        "What it is for."
    )


@pytest.mark.parametrize(
    "meta,lang",
    [
        ({"file_path": "content/fr/docs/a.md"}, "fr"),
        ({"file_path": "content/zh-cn/a.md"}, "zh-cn"),
        ({"file_path": "content/docs/a.md"}, "en"),
        ({"file_path": "content/a.md"}, "en"),
        ({"file_path": "content/docs/a.md", "lang": "DE"}, "de"),
    ],
)
def test_language_of_a_page(meta, lang):
    assert published.language(meta) == lang


def test_page_ids_split_on_the_first_slash():
    assert pages.split_page_id("docs-a/content/x/y.md") == ("docs-a", "content/x/y.md")
    assert pages.split_page_id("docs-a") is None
    assert pages.is_chunk_id("a" * 32) and not pages.is_chunk_id("a" * 31)


def test_a_page_over_the_largest_budget_does_not_ask_for_a_larger_one():
    from hetriever.serve.mcp_server import MAX_TOKEN_BUDGET, format_page

    page = {
        "title": "Long",
        "url": "/long/",
        "link": "/long/",
        "repository": "r-docs",
        "page_id": "r-docs/l.md",
        "chunks": [{"heading": "", "text": "word " * 50_000}],
    }
    assert "larger max_tokens" in format_page(page, 1000)
    last = format_page(page, MAX_TOKEN_BUDGET)
    assert "larger max_tokens" not in last and "search_docs" in last


def test_clip_respects_the_budget_and_says_so():
    text = " ".join(["word"] * 1000)
    out = clip(text, 50)
    assert len(out) <= 50 * 4 + 80 and out.endswith("]") and "cut to the token budget" in out
    assert clip("short", 50) == "short"


def test_the_concurrency_cap_queues_then_refuses():
    # The cap is the service's own logic; no store is touched by `call`.
    service = DocsService(
        load_settings(env={}, config_file=None),
        store=object(),
        limits=Limits(max_concurrency=1, max_waiting=1),
    )
    release = threading.Event()
    outcomes: list[str] = []

    async def go():
        async def one(i: int):
            try:
                await service.call(release.wait, 30)
                outcomes.append("ran")
            except Busy:
                outcomes.append("busy")

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for i in range(3):
                    tg.start_soon(one, i)
                    await anyio.sleep(0.05)
                await anyio.sleep(0.1)
                release.set()

    anyio.run(go)
    assert sorted(outcomes) == ["busy", "ran", "ran"]


def test_readiness_is_not_queued_behind_searches(tmp_path):
    # A server whose search queue is full is busy, not unready: a probe that went through the
    # queue would take every instance out of a load balancer at peak load.
    import httpx

    from hetriever.serve.http_api import create_app
    from hetriever.serve.telemetry import Telemetry

    class Chroma:  # the index backend's health check, as the store's Chroma handle answers it
        def health_check(self) -> bool:
            return True

    class Answering:
        chroma = Chroma()

    service = DocsService(
        load_settings(env={}, config_file=None),
        store=Answering(),
        limits=Limits(max_concurrency=1, max_waiting=0),
    )
    telemetry = Telemetry(tmp_path, "http")
    app = create_app(service, telemetry=telemetry)
    release = threading.Event()

    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(service.call, release.wait, 30)
                    await anyio.sleep(0.05)
                    try:
                        with pytest.raises(Busy):  # the queue is full
                            await service.call(lambda: None)
                        return await client.get("/readyz")
                    finally:
                        release.set()

    try:
        ready = anyio.run(go)
    finally:
        telemetry.close()
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}


def test_a_default_k_above_the_servers_limit_is_the_limit():
    settings = load_settings(env={"HETRIEVER_DEFAULT_TOP_K": "80"}, config_file=None)
    service = DocsService(settings, store=object())
    assert service.check_query("where", None) == ("where", 50)
    small = DocsService(
        load_settings(
            env={"HETRIEVER_MAX_TOP_K": "3", "HETRIEVER_DEFAULT_TOP_K": "2"}, config_file=None
        ),
        store=object(),
    )
    assert small.check_query("where", None) == ("where", 2)
    with pytest.raises(RequestError, match="k must be an integer from 1 to 3"):
        small.check_query("where", 4)
    with pytest.raises(RequestError, match="surrogate"):
        small.check_query("where \ud83d", 2)


def test_mcp_start_up_writes_nothing_to_the_stdio_wire():
    # A stray write while the model and index load, from Python or from a native library
    # (straight to fd 1), lands on stderr; stdout is the wire again afterwards.
    script = (
        "import os\nfrom hetriever.serve.run import _stdout_to_stderr\n"
        "with _stdout_to_stderr():\n    print('stray print')\n"
        "    os.write(1, b'native write\\n')\nprint('protocol')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "protocol\n"
    assert "stray print" in out.stderr and "native write" in out.stderr
