"""`hetriever mcp` driven by the official MCP client: a real session over stdio (the server a
subprocess, as a coding assistant starts it) and over streamable HTTP, against a real index."""

from __future__ import annotations

import json
import logging
import re
import selectors
import signal
import subprocess
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.support.serve_fixtures import HETRIEVER, PRIVATE_KEY, TEAM_KEY, running

pytestmark = pytest.mark.slow  # a real `hetriever serve` / `hetriever mcp` process

SESSION_TIMEOUT = 240  # seconds for a whole session, model load included


def stdio(workspace, **env: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=str(HETRIEVER), args=["mcp"], env={**workspace.env, **env}, cwd=str(workspace.root)
    )


def text_of(result: Any) -> str:
    return "\n".join(part.text for part in result.content)


def in_session(server: Any, steps) -> Any:
    async def go():
        with anyio.fail_after(SESSION_TIMEOUT):
            async with Client(server) as client:
                return await steps(client)

    return anyio.run(go)


def test_stdio_tools_search_page_and_repositories(served_docs):
    async def steps(client):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {"search_docs", "get_page", "list_repositories"}
        assert tools["search_docs"].input_schema["required"] == ["query"]
        # every argument says what it is, and the bounds are in the schema
        for tool in tools.values():
            for name, prop in tool.input_schema.get("properties", {}).items():
                assert prop.get("description"), (tool.name, name)
        (k,) = [
            v
            for v in tools["search_docs"].input_schema["properties"]["k"]["anyOf"]
            if v.get("type") == "integer"
        ]
        assert (k["minimum"], k["maximum"]) == (1, 50)
        found = await client.call_tool(
            "search_docs", {"query": "where function comparison", "k": 3}
        )
        page = None
        if not found.is_error:
            first_id = text_of(found).split("page id: ", 1)[1].split()[0]
            page = await client.call_tool("get_page", {"url_or_id": first_id})
        by_url = await client.call_tool("get_page", {"url_or_id": "/docs/templates/where/"})
        repos = await client.call_tool("list_repositories", {})
        hidden = await client.call_tool("search_docs", {"query": "kestrel rotation payroll"})
        # an agent pastes a link it was given: the page first, at the section it points to
        link = await client.call_tool(
            "search_docs",
            {"query": "https://docs.example.org/docs/templates/where/#operators", "k": 2},
        )
        french = await client.call_tool("search_docs", {"query": "la fonction where"})
        return found, page, by_url, repos, hidden, link, french

    found, page, by_url, repos, hidden, link, french = in_session(stdio(served_docs), steps)
    # told no language, French words keep to the French page, and the answer says so
    assert "(in fr, the query's language" in text_of(french) and "/fr/" in text_of(french), text_of(
        french
    )
    first_link = text_of(link).split("[2]")[0]
    assert "[1] where > Operators" in first_link and "contained in a slice" in first_link, text_of(
        link
    )
    text = text_of(found)
    assert not found.is_error, text
    assert text.startswith("3 result(s)") or "result(s) for" in text
    first = text.split("[2]")[0]
    assert "[1] where" in first and "URL: /docs/templates/where/" in first
    assert "comparison condition" in first  # the passage itself, citable
    assert "## Usage" in text_of(page) and "URL: /docs/templates/where/" in text_of(page)
    assert text_of(by_url) == text_of(page)
    assert "- sample-docs:" in text_of(repos) and "team-notes" not in text_of(repos)
    assert "team-notes" not in text_of(hidden) and "private-ops" not in text_of(hidden)
    # the session's searches are in the metrics store, as the MCP server's
    summary = json.loads(served_docs.cli("metrics", "--source", "mcp", "--json").stdout)
    assert summary["count"] >= 2 and set(summary["by_mode"]) <= {
        "mcp:hybrid",
        "mcp:dense",
        "mcp:bm25",
    }


def test_stdio_key_grants_its_levels(served_docs):
    async def steps(client):
        return (
            await client.call_tool("search_docs", {"query": "kestrel on-call rotation", "k": 10}),
            await client.call_tool("list_repositories", {}),
        )

    found, repos = in_session(stdio(served_docs, HETRIEVER_API_KEY=TEAM_KEY), steps)
    assert "repository: team-notes" in text_of(found)
    assert "private-ops" not in text_of(found)
    assert "- team-notes:" in text_of(repos)


def test_stdio_bad_input_is_a_tool_error_and_budgets_hold(served_docs):
    async def steps(client):
        return [
            await client.call_tool(name, args)
            for name, args in (
                ("search_docs", {"query": ""}),
                ("search_docs", {"query": "where", "k": 500}),
                ("search_docs", {"query": "where", "max_tokens": 5}),
                ("get_page", {"url_or_id": "team-notes/content/oncall.md"}),  # hidden = absent
                (
                    "get_page",
                    {"url_or_id": "sample-docs/content/docs/templates/where.md", "max_tokens": 100},
                ),
                ("search_docs", {"query": "where function usage", "k": 10, "max_tokens": 300}),
                ("search_docs", {"query": "where", "repository": "no-such-docs"}),
            )
        ]

    empty, too_many, tiny, hidden, short_page, short_search, unknown = in_session(
        stdio(served_docs), steps
    )
    assert not unknown.is_error and "No repository named 'no-such-docs'" in text_of(unknown)
    assert empty.is_error and "query is empty" in text_of(empty)
    assert too_many.is_error and "50" in text_of(too_many)  # the schema's bound
    assert tiny.is_error and "max_tokens" in text_of(tiny)
    assert hidden.is_error and "no page" in text_of(hidden)
    assert not short_page.is_error and "cut to the token budget" in text_of(short_page)
    assert len(text_of(short_page)) <= 100 * 4 + 80
    assert len(text_of(short_search)) <= 300 * 4 + 80


def test_stdio_sdk_log_lines_follow_the_log_level_and_stdout_is_protocol_only(
    served_docs, tmp_path, caplog
):
    async def steps(client):
        # the SDK logs a tool call that fails at INFO
        return await client.call_tool("search_docs", {"query": ""})

    def stderr_of(level: str) -> str:
        path = tmp_path / f"stderr-{level}.txt"
        with path.open("w") as errlog:
            failed = in_session(
                stdio_client(stdio(served_docs, HETRIEVER_LOG_LEVEL=level), errlog=errlog), steps
            )
        assert failed.is_error
        return path.read_text()

    # the client logs each stdout line that is not a protocol message
    with caplog.at_level(logging.ERROR, logger="mcp.client.stdio"):
        quiet, told = stderr_of("WARNING"), stderr_of("INFO")
    assert "search_docs" not in quiet, quiet
    assert "Tool 'search_docs' failed" in told, told
    assert not [r for r in caplog.records if r.name.startswith("mcp.client")], caplog.text


def test_stdio_bad_key_fails_at_start_with_one_line(served_docs):
    out = served_docs.cli("mcp", HETRIEVER_API_KEY="not-a-key")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == "hetriever: error: invalid API key"
    assert "Traceback" not in out.stderr


def test_stdio_key_without_a_key_file_says_what_is_missing(served_docs):
    out = served_docs.cli(
        "mcp", HETRIEVER_API_KEY=TEAM_KEY, HETRIEVER_API_KEYS_FILE="", HETRIEVER_API_KEYS=""
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert "no key file grants it" in last and "HETRIEVER_API_KEYS_FILE" in last


def test_stdio_server_stops_on_ctrl_c_while_the_client_keeps_stdin_open(served_docs):
    proc = subprocess.Popen(
        [str(HETRIEVER), "mcp"],
        env=served_docs.env,
        cwd=served_docs.root,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        proc.stdin.write(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "test", "version": "1"},
                    },
                }
            )
            + "\n"
        )
        proc.stdin.flush()
        with selectors.DefaultSelector() as waiting:  # select() fails on fds >= 1024
            waiting.register(proc.stdout, selectors.EVENT_READ)
            assert waiting.select(SESSION_TIMEOUT), "no answer to initialize"
        assert '"id":1' in proc.stdout.readline().replace(" ", "")
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=20)  # stdin still open: the client has not gone away
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=15)
        proc.stdin.close()
    err = proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    assert code == 130 and "hetriever: interrupted" in err and "Traceback" not in err


class RawSession:
    """A `hetriever mcp` process spoken to line by line, so a test can send what the SDK's
    client cannot: malformed lines, bad envelopes, bytes that are not UTF-8, and a lone
    surrogate escape (`"\\ud83d"`, which clients that write JSON with ASCII escapes send and
    the SDK's client refuses to serialise)."""

    def __init__(self, workspace, **env: str) -> None:
        self.proc = subprocess.Popen(
            [str(HETRIEVER), "mcp"],
            env={**workspace.env, **env},
            cwd=workspace.root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.waiting = selectors.DefaultSelector()  # select() fails on fds >= 1024
        self.waiting.register(self.proc.stdout, selectors.EVENT_READ)

    def send(self, line: bytes | dict) -> None:
        raw = line if isinstance(line, bytes) else json.dumps(line).encode()
        self.proc.stdin.write(raw + b"\n")
        self.proc.stdin.flush()

    def answer(self) -> dict:
        assert self.waiting.select(SESSION_TIMEOUT), "no answer"
        return json.loads(self.proc.stdout.readline())

    def close(self) -> str:
        self.waiting.close()
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=15)
        err = self.proc.stderr.read().decode(errors="replace")
        self.proc.stdout.close()
        self.proc.stderr.close()
        return err


def test_stdio_every_line_gets_an_answer_and_the_session_survives(served_docs):
    session = RawSession(served_docs)

    def call(request_id: int, arguments: dict) -> dict:
        return {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": "search_docs", "arguments": arguments},
        }

    try:
        session.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "test", "version": "1"},
                },
            }
        )
        assert session.answer()["id"] == 1
        session.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        answers = {}
        for name, line in (
            ("malformed", b'{"jsonrpc": "2.0", "id": 2, "method": "tools/ca'),
            ("not json", b"hello?"),
            (
                "params not an object",
                json.dumps(
                    {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": "where"}
                ).encode(),
            ),
            ("not an envelope", b'{"id": 5, "question": "where"}'),
            (
                "lone surrogate",
                b'{"jsonrpc": "2.0", "id": 6, "method": "tools/call", '
                b'"params": {"name": "search_docs", '
                b'"arguments": {"query": "\\ud83d where"}}}',
            ),
            (
                "not UTF-8",
                json.dumps(call(7, {"query": "where XX"})).encode().replace(b"XX", b"\xff\xfe"),
            ),
            ("arguments of the wrong type", json.dumps(call(8, {"query": 5})).encode()),
            ("unknown method", b'{"jsonrpc": "2.0", "id": 9, "method": "no/such"}'),
            ("still serving", json.dumps(call(10, {"query": "where function"})).encode()),
        ):
            session.send(line)
            answers[name] = session.answer()
    finally:
        err = session.close()
    assert answers["malformed"] == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": answers["malformed"]["error"]["message"]},
    }
    assert answers["not json"]["error"]["code"] == -32700
    assert answers["params not an object"]["id"] == 4
    assert answers["params not an object"]["error"]["code"] == -32602
    assert answers["not an envelope"]["id"] == 5
    assert answers["not an envelope"]["error"]["code"] == -32600
    for name, request_id in (("lone surrogate", 6), ("not UTF-8", 7), ("still serving", 10)):
        assert answers[name]["id"] == request_id, answers[name]
        assert not answers[name]["result"]["isError"], answers[name]
    assert answers["arguments of the wrong type"]["result"]["isError"]
    assert answers["unknown method"]["error"]["code"] == -32601
    # each refusal is a warning line, not a DEBUG one, and nothing raised
    for event in (
        "mcp_parse_error",
        "mcp_invalid_params",
        "mcp_invalid_request",
        "mcp_lone_surrogates",
        "mcp_invalid_utf8",
    ):
        assert event in err, (event, err[-3000:])
    assert "Traceback" not in err


def test_streamable_http_with_keys(served_docs):
    with running(served_docs, "mcp", "--transport", "http", ready_path="/mcp") as served:
        bad = httpx.post(
            served.url + "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Authorization": "Bearer wrong"},
            timeout=30,
        )
        assert bad.status_code == 401 and bad.json() == {"error": "invalid API key"}

        def over_http(key: str | None):
            async def go():
                headers = {"Authorization": f"Bearer {key}"} if key else {}
                with anyio.fail_after(SESSION_TIMEOUT):
                    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
                        transport = streamable_http_client(served.url + "/mcp", http_client=http)
                        async with Client(transport) as client:
                            return text_of(
                                await client.call_tool(
                                    "search_docs", {"query": "kestrel payroll schedule", "k": 10}
                                )
                            )

            return anyio.run(go)

        assert "private-ops" not in over_http(None)
        assert "repository: private-ops" in over_http(PRIVATE_KEY)


def test_stdio_search_names_its_facets_and_a_section_narrows(served_docs):
    async def steps(client):
        wide = await client.call_tool("search_docs", {"query": "release where function", "k": 3})
        narrow = await client.call_tool(
            "search_docs", {"query": "release where function", "section": "blog", "k": 3}
        )
        return text_of(wide), text_of(narrow)

    wide, narrow = in_session(stdio(served_docs), steps)
    facets = wide.split("candidate pages: ", 1)[1]
    assert re.search(r"section (docs|blog) \(\d+\), (docs|blog) \(\d+\)", facets), wide
    assert "/news/" in narrow and "/docs/" not in narrow.split("Narrow with")[0], narrow


def _peak_rss_kib(pid: int) -> int:
    """The process's peak resident set (VmHWM), in KiB."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc/<pid>/status")


def test_stdio_refuses_an_over_long_line_without_holding_it_and_serves_on(served_docs):
    # A 50 MB line: read in bounded pieces, answered with an error carrying its id, and the
    # rest of it discarded; the process never holds more than the cap (here 1 MiB).
    session = RawSession(served_docs, HETRIEVER_MCP_MAX_LINE=str(1024 * 1024))
    size = 50 * 1024 * 1024
    try:
        session.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "test", "version": "1"},
                },
            }
        )
        assert session.answer()["id"] == 1
        session.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        before = _peak_rss_kib(session.proc.pid)
        head = (
            b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": '
            b'"search_docs", "arguments": {"query": "'
        )
        session.send(head + b"x" * (size - len(head) - 4) + b'"}}}')
        refused = session.answer()
        after = _peak_rss_kib(session.proc.pid)
        session.send(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "search_docs", "arguments": {"query": "where function"}},
            }
        )
        served = session.answer()
    finally:
        err = session.close()
    assert refused["id"] == 2 and refused["error"]["code"] == -32600, refused
    assert "over the 1048576-byte limit" in refused["error"]["message"]
    assert served["id"] == 3 and not served["result"]["isError"], served
    # Reading the line whole took well over 100 MB (bytes, text, parse); bounded pieces
    # stay within a few times the cap.
    assert after - before < 16 * 1024, (before, after)
    assert "mcp_line_too_long" in err and "Traceback" not in err


def test_stdio_a_request_before_initialize_is_told_to_initialize(served_docs):
    session = RawSession(served_docs)
    try:
        session.send({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        early = session.answer()
        session.send({"jsonrpc": "2.0", "id": 2, "method": "ping"})  # allowed before, as MCP says
        pong = session.answer()
        session.send({"jsonrpc": "2.0", "id": 3, "method": "no/such"})
        unknown = session.answer()
        session.send(
            {
                "jsonrpc": "2.0",
                "id": 4,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "test", "version": "1"},
                },
            }
        )
        assert session.answer()["id"] == 4
        session.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        session.send({"jsonrpc": "2.0", "id": 5, "method": "tools/list"})
        listed = session.answer()
    finally:
        session.close()
    assert early["id"] == 1 and early["error"]["code"] == -32600, early
    assert "not initialized" in early["error"]["message"]
    assert pong == {"jsonrpc": "2.0", "id": 2, "result": {}}
    assert unknown["error"]["code"] == -32601  # unknown is unknown, initialised or not
    assert listed["id"] == 5 and {t["name"] for t in listed["result"]["tools"]} >= {
        "search_docs",
        "list_repositories",
    }
