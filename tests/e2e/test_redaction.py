"""Nothing leaves the process that should not: a deploy token in a submodule's URL, a server
path, a repository name read as another.

One parent repository holds two submodules: `leaky-docs`, whose `.gitmodules` URL carries a
token (`https://deploy-bot:ghp_secret...@example.invalid/acme/docs.git`), and `local-docs`,
cloned from a directory on this machine. Each surface a URL or an error leaves by is checked:
the HTTP API, MCP, logs, `status --json`, Prefect artifacts and webhook answers.
"""

from __future__ import annotations

import io
import json
import os
import socket
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from hetriever.core.errors import BackendConnectionError
from hetriever.core.redact import public_url, redact_text, redact_url
from hetriever.store.catalog import Catalog
from tests.support.helpers import commit_all, git, init_repo, write_files
from tests.support.serve_fixtures import HETRIEVER, Workspace, running

TOKEN = "ghp_secret0123456789abcdefTOKEN"
# A password git takes as written, holding what ends a URL's authority to a parser that splits
# at the first "/", "?" or "#", and what ends a URL in a message (quotes, "<", a space); the
# token on both sides, so a part of it left over is seen.
PASSWORD = f"{TOKEN}#?/'\"< {TOKEN}"
LEAKY_URL = f"https://deploy-bot:{PASSWORD}@example.invalid/acme/docs.git"
CLEAN_URL = "https://example.invalid/acme/docs.git"
PAGE = "---\ntitle: Kestrel guide\n---\n\nThe kestrel guide explains nesting boxes.\n"
SESSION_TIMEOUT = 240


# --- the redaction functions ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "redacted", "public"),
    [
        (LEAKY_URL, CLEAN_URL, CLEAN_URL),
        *[
            (
                f"https://deploy-bot:{TOKEN}{c}x{TOKEN}@example.invalid/acme/docs.git",
                CLEAN_URL,
                CLEAN_URL,
            )
            for c in "#?/'\"< @"
        ],
        (f"https://{TOKEN}#/?@github.com/a/b", "https://github.com/a/b", "https://github.com/a/b"),
        (
            f"https://u:{TOKEN}@host.example:8443/x.git",
            "https://host.example:8443/x.git",
            "https://host.example:8443/x.git",
        ),
        (
            f"https://u:{TOKEN}/x@[2001:db8::1]:8443/x.git",
            "https://[2001:db8::1]:8443/x.git",
            "https://[2001:db8::1]:8443/x.git",
        ),
        (f"http://u:{TOKEN}?@[::1]/x", "http://[::1]/x", "http://[::1]/x"),
        (
            f"ssh://git:{TOKEN}#@host.example:2222/x.git",
            "ssh://host.example:2222/x.git",
            "ssh://host.example:2222/x.git",
        ),
        # git's scp-like form: a password before the host goes, with its user
        (
            f"deploy:{TOKEN}#?/x@host.example:acme/docs.git",
            "host.example:acme/docs.git",
            "host.example:acme/docs.git",
        ),
        (
            f"deploy:{TOKEN} x'\"<@[2001:db8::1]:acme/docs.git",
            "[2001:db8::1]:acme/docs.git",
            "[2001:db8::1]:acme/docs.git",
        ),
        (f"https://{TOKEN}@github.com/a/b", "https://github.com/a/b", "https://github.com/a/b"),
        (
            "https://user:p@ss@host.example/x.git",
            "https://host.example/x.git",
            "https://host.example/x.git",
        ),
        (
            "ssh://git:pw@host.example:22/x.git",
            "ssh://host.example:22/x.git",
            "ssh://host.example:22/x.git",
        ),
        (
            "git@github.com:acme/docs.git",
            "git@github.com:acme/docs.git",
            "git@github.com:acme/docs.git",
        ),  # scp-like: a user name, no secret
        ("https://example.org/x.git", "https://example.org/x.git", "https://example.org/x.git"),
        ("/srv/mirrors/docs", "/srv/mirrors/docs", ""),  # a server path is not published
        ("../docs.git", "../docs.git", ""),
        ("file:///srv/mirrors/docs", "file:///srv/mirrors/docs", ""),
        ("", "", ""),
    ],
)
def test_redact_and_publish_urls(url, redacted, public):
    assert redact_url(url) == redacted
    assert public_url(url) == public


def test_redact_text_removes_every_urls_credentials():
    said = (
        f"fatal: unable to access '{LEAKY_URL}/': 403; also "
        f"http://a:b@127.0.0.1:4200/api and mailto-like kim@example.org stay"
    )
    out = redact_text(said)
    assert TOKEN not in out and "a:b@" not in out
    assert f"'{CLEAN_URL}/'" in out and "http://127.0.0.1:4200/api" in out
    assert "kim@example.org" in out


@pytest.mark.parametrize(
    ("said", "left"),
    [
        # git quotes a URL it rejects; the password may hold the quote, a space, "#", "/"...
        (
            f"fatal: unable to access '{LEAKY_URL}/': URL rejected",
            f"fatal: unable to access '{CLEAN_URL}/': URL rejected",
        ),
        (
            f'remote "https://u:{TOKEN}"x<y@host.example/x" failed',
            'remote "https://host.example/x" failed',
        ),
        (
            f"cannot reach https://u:{TOKEN}/x@[::1]:8080/api now",
            "cannot reach https://[::1]:8080/api now",
        ),
        (
            f"fatal: 'deploy:{TOKEN}#/x@host.example:acme/docs.git' does not appear to be a git "
            "repository",
            "fatal: 'host.example:acme/docs.git' does not appear to be a git repository",
        ),
        (f"url=https://u:{TOKEN} x@host.example", "url=https://host.example"),
        # what holds no credentials stays whole
        (
            "https://host.example/x is down, mail kim@example.org",
            "https://host.example/x is down, mail kim@example.org",
        ),
        (
            "https://host.example:8080 is down, kim@example.org",
            "https://host.example:8080 is down, kim@example.org",
        ),
        (
            "git@github.com:acme/docs.git and https://h.example/x",
            "git@github.com:acme/docs.git and https://h.example/x",
        ),
    ],
)
def test_redact_text_finds_a_password_of_any_characters(said, left):
    assert redact_text(said) == left


def test_the_catalog_stores_urls_redacted_and_redacts_what_an_older_one_stored(tmp_path):
    catalog = Catalog.for_state_dir(tmp_path)
    try:
        catalog.upsert_repository("leaky-docs", url=LEAKY_URL)
        stored = (
            sqlite3.connect(catalog.path)
            .execute("SELECT url FROM repositories WHERE name = 'leaky-docs'")
            .fetchone()[0]
        )
        assert stored == CLEAN_URL
        with sqlite3.connect(catalog.path) as conn:  # as an older version left it
            conn.execute("UPDATE repositories SET url = ? WHERE name = 'leaky-docs'", (LEAKY_URL,))
        record = catalog.repository("leaky-docs")
        assert record is not None and record.url == CLEAN_URL
    finally:
        catalog.close()


def test_log_lines_carry_no_credentials(monkeypatch):
    from hetriever.core import logs

    sink = io.StringIO()
    monkeypatch.setattr(logs.sys, "stderr", sink)
    logs.configure_logging("INFO", "json")
    try:
        log = logs.get_logger("hetriever.test")
        log.warning("fetch_failed", url=LEAKY_URL, error=f"cannot reach {LEAKY_URL}")
        try:
            raise RuntimeError(f"git said {LEAKY_URL}")
        except RuntimeError:
            log.exception("crashed")
    finally:
        logs.configure_logging()
    written = sink.getvalue()
    assert "fetch_failed" in written and "crashed" in written
    assert TOKEN not in written and CLEAN_URL in written


def test_artifacts_carry_no_credentials():
    from flows.artifacts import repository_markdown, summary_markdown
    from hetriever.core.models import IndexResult, SkippedFile

    error = f"SourceError: git fetch from {LEAKY_URL} failed"
    result = IndexResult(
        repository="leaky-docs",
        mode="full",
        old_commit=None,
        new_commit="a" * 40,
        failed=[SkippedFile("content/x.md", error)],
    )
    runs = [
        {
            "started_at": "2026-01-01T00:00:00+00:00",
            "mode": "full",
            "new_commit": "a" * 40,
            "outcome": "failed",
            "error": error,
            "counts": {},
        }
    ]
    pages = [
        repository_markdown(result, runs),
        summary_markdown([{"repository": "leaky-docs", "ok": False, "error": error}]),
    ]
    for page in pages:
        assert TOKEN not in page and CLEAN_URL in page


def test_webhook_answers_carry_no_credentials(tmp_path):
    from tests.support.webhook_support import (
        SHA,
        push_payload,
        send,
        webhook_config,
    )
    from tests.support.webhook_support import (
        running as webhook,
    )

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: the Prefect API does not answer
    api = f"http://admin:{TOKEN}@127.0.0.1:{port}/api"
    with webhook(webhook_config(tmp_path, api, prefect_timeout=10.0)) as base:
        resp = send(base, push_payload(after=SHA))
    assert resp.status_code == 503, resp.text
    assert "unreachable" in resp.json()["error"] and TOKEN not in resp.text


# --- a served workspace whose submodule URL carries a token ---------------------------------


@pytest.fixture(scope="module")
def leaky(tmp_path_factory, minilm_model_dir) -> Workspace:
    root = tmp_path_factory.mktemp("leaky")
    sources = {}
    for name in ("leaky-docs", "local-docs"):
        repo = init_repo(root / "src" / name)
        write_files(repo, {"content/guide.md": PAGE.replace("Kestrel", name.title())})
        commit_all(repo, name)
        sources[name] = repo
    parent = init_repo(root / "parent")
    commit_all(parent, "init")
    for name, repo in sources.items():
        git(
            parent,
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            str(repo),
            f"docs/{name}",
        )
    # The URL as a deploy token leaves it, for the submodule that is cloned from a host.
    git(parent, "config", "--file", ".gitmodules", "submodule.docs/leaky-docs.url", LEAKY_URL)
    commit_all(parent, "submodules")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HETRIEVER_")},
        "HETRIEVER_DOCS_ROOT": str(parent),
        "HETRIEVER_SEARCH_RESIDENT_IDLE": "0",  # no resident search process
        "HETRIEVER_CHROMA_PATH": str(root / "chroma"),
        "HETRIEVER_STATE_DIR": str(root / "state"),
        "HETRIEVER_MODEL_DIR": str(minilm_model_dir),
        "HETRIEVER_LOG_LEVEL": "INFO",
        "HETRIEVER_LOG_FORMAT": "json",
    }
    workspace = Workspace(root, env, sources["leaky-docs"])
    done = workspace.cli("ingest", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert TOKEN not in done.stdout + done.stderr  # the run's own output and log lines
    # What discovery stored has no token; an index written before it did is redacted on the
    # way out: put one back as an older version would have left it.
    catalog = Catalog.for_state_dir(root / "state")
    path = catalog.path
    catalog.close()
    with sqlite3.connect(path) as conn:
        assert TOKEN not in json.dumps(conn.execute("SELECT url FROM repositories").fetchall())
        conn.execute("UPDATE repositories SET url = ? WHERE name = 'leaky-docs'", (LEAKY_URL,))
    return workspace


@pytest.mark.slow
def test_status_json_carries_no_credentials(leaky):
    done = leaky.cli("status", "--json")
    assert done.returncode == 0, done.stderr
    assert {r["repository"] for r in json.loads(done.stdout)} == {"leaky-docs", "local-docs"}
    assert TOKEN not in done.stdout + done.stderr


@pytest.mark.slow
def test_http_publishes_urls_without_credentials_or_server_paths(leaky):
    with running(leaky, "serve") as api:
        resp = httpx.get(api.url + "/repositories", timeout=60)
        assert resp.status_code == 200
        urls = {r["repository"]: r["url"] for r in resp.json()["repositories"]}
        assert urls == {"leaky-docs": CLEAN_URL, "local-docs": ""}
        assert TOKEN not in resp.text and str(leaky.root) not in resp.text
        for bad in ("../../etc", "leaky-docs' --", "Leaky.Docs", "x"):
            got = httpx.get(
                api.url + "/search", params={"q": "kestrel", "repository": bad}, timeout=60
            )
            assert got.status_code == 400, (bad, got.text)
            assert "invalid repository name" in got.json()["error"]
        hint = httpx.get(
            api.url + "/search", params={"q": "guide", "repository": "Leaky.Docs"}, timeout=60
        ).json()["error"]
        assert "did you mean 'leaky-docs'" in hint
        posted = httpx.post(
            api.url + "/search", json={"q": "guide", "repository": ["../x"]}, timeout=60
        )
        assert posted.status_code == 400
        ok = httpx.get(
            api.url + "/search", params={"q": "guide", "repository": "leaky-docs"}, timeout=60
        )
        assert ok.status_code == 200 and ok.json()["results"]
    assert TOKEN not in api.log.read_text()


def test_error_messages_name_no_server_path(tmp_path):
    from hetriever.core.config import load_settings
    from hetriever.serve.service import DocsService

    settings = load_settings(
        env={},
        config_file=None,
        chroma_path=tmp_path / "chroma",
        state_dir=tmp_path / "state",
        docs_root=tmp_path / "docs",
    )
    service = DocsService(settings, store=object())  # type: ignore[arg-type]
    exc = BackendConnectionError(
        f"cannot use {tmp_path / 'state' / 'bm25' / 'x.sqlite'}: "
        f"disk I/O error, remote {LEAKY_URL}",
        location=str((tmp_path / "chroma").resolve()),
    )
    said = service.public_message(exc)
    assert str(tmp_path) not in said and TOKEN not in said
    assert "<state dir>/bm25/x.sqlite" in said and "[<chroma data>]" in said


@pytest.mark.slow
def test_mcp_lists_repositories_without_credentials_and_refuses_bad_names(leaky):
    server = StdioServerParameters(
        command=str(HETRIEVER), args=["mcp"], env=leaky.env, cwd=str(leaky.root)
    )

    async def steps(client: Any) -> list[Any]:
        return [
            await client.call_tool("list_repositories", {}),
            await client.call_tool("search_docs", {"query": "guide", "repository": "../../etc"}),
            await client.call_tool(
                "search_docs", {"query": "guide", "repository": "leaky-docs' --"}
            ),
        ]

    async def go() -> list[Any]:
        with anyio.fail_after(SESSION_TIMEOUT):
            async with Client(server) as client:
                return await steps(client)

    listed, escaped, quoted = anyio.run(go)
    text = "\n".join(part.text for part in listed.content)
    assert "leaky-docs" in text and CLEAN_URL in text
    assert TOKEN not in text and str(leaky.root) not in text
    for refused in (escaped, quoted):
        said = "\n".join(part.text for part in refused.content)
        assert refused.is_error and "invalid repository name" in said


def test_a_gitmodules_path_leading_out_is_no_repository_named_after_its_last_part(tmp_path):
    from hetriever.discover.repositories import discover_repositories

    good = init_repo(tmp_path / "src" / "good-docs")
    write_files(good, {"content/a.md": PAGE})
    commit_all(good, "good")
    parent = init_repo(tmp_path / "parent")
    commit_all(parent, "init")
    git(
        parent,
        "-c",
        "protocol.file.allow=always",
        "submodule",
        "add",
        "-q",
        str(good),
        "docs/good-docs",
    )
    with open(parent / ".gitmodules", "a") as f:
        f.write('[submodule "etc"]\n\tpath = ../../etc\n\turl = https://x.invalid/etc\n')
    commit_all(parent, "evil")
    repos = {r.name: r for r in discover_repositories(parent)}
    assert set(repos) == {"good-docs", "../../etc"}
    assert "outside the parent" in repos["../../etc"].problem
    assert not Path(repos["../../etc"].path).exists()
    # One submodule alone, leading out: its problem, not a name error, is what is reported.
    (parent / ".gitmodules").write_text(
        '[submodule "etc"]\n\tpath = ../../etc\n\turl = https://x.invalid/etc\n'
    )
    (only,) = discover_repositories(parent)
    assert only.name == "../../etc" and "outside the parent" in only.problem


def test_a_relative_setting_hides_its_resolved_path_and_leaves_words_alone(tmp_path, monkeypatch):
    from hetriever.core.config import load_settings
    from hetriever.serve.service import DocsService

    monkeypatch.chdir(tmp_path)
    settings = load_settings(
        env={}, config_file=None, docs_root=Path("docs"), chroma_path=Path("chroma_data")
    )
    service = DocsService(settings, store=object())  # type: ignore[arg-type]
    said = service.public_message(
        RuntimeError(f"no page 'sample-docs/content/docs/a.md' under {tmp_path / 'docs'}")
    )
    assert said == "no page 'sample-docs/content/docs/a.md' under <docs root>"
