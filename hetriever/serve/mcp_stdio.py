"""The MCP stdio transport, answering every line it reads.

The SDK's own transport drops a line it cannot parse (logged at DEBUG) and sends nothing back,
so a client waits for its own timeout: a malformed line, and a tool call carrying a lone
surrogate (half an emoji, `"\\ud83d"`), which JSON allows as an escape but the SDK's parser
refuses. Here each line is read as bytes and
- invalid UTF-8 is decoded with U+FFFD in place of the bad bytes, a warning logged;
- lone surrogates are replaced by U+FFFD, a warning logged, and the message is served;
- a line that is not JSON is answered with JSON-RPC `-32700` (parse error, id null);
- a request whose `params` is not an object is answered with `-32602` (invalid params), and
  other JSON that is not a JSON-RPC message with `-32600` (invalid request), with its id when
  it has one.
Parameters of the wrong shape inside an object are the SDK's to answer (`-32602`; a tool's
arguments of the wrong type come back as a tool error, as MCP asks).

A line is read in bounded pieces: one over `mcp_max_line` bytes (default 4 MiB) is answered
with `-32600` (with its id when the line's first 64 KiB hold it at the top level, as clients
write it before `params`), the rest of it read and thrown away piece by piece, so the
process never holds more than the cap of one line; then serving goes on.

While serving, fd 0 reads the null device and fd 1 goes to stderr, as in the SDK, so stray
output of a library never reaches the wire.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage

from hetriever.core.logs import get_logger

log = get_logger(__name__)

_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")
REPLACEMENT = "\ufffd"
PIECE = 64 * 1024  # what is read at a time past the cap, and what is kept to find an id
DEFAULT_MAX_LINE = 4 * 1024 * 1024


@dataclass(frozen=True)
class OverLong:
    """A line longer than the cap: its first `PIECE` bytes and how long it was."""

    head: bytes
    length: int


def read_line(stream: BinaryIO, limit: int) -> bytes | OverLong | None:
    """The next line of `stream` (None at its end), or an `OverLong` for a line over `limit`
    bytes, whose rest is read and dropped piece by piece (never more than `limit` held)."""
    line = stream.readline(limit + 1)
    if not line:
        return None
    if line.endswith(b"\n") or len(line) <= limit:
        return line
    head, length = line[:PIECE], len(line)
    del line
    while True:
        piece = stream.readline(PIECE)
        length += len(piece)
        if not piece or piece.endswith(b"\n"):
            return OverLong(head, length)


def top_level_id(head: bytes) -> Any:
    """The `id` of the JSON object the cut `head` begins, when it is there before the cut
    at the object's top level (never one nested in `params`); else None."""
    text, decoder = head.decode("utf-8", errors="replace"), json.JSONDecoder()
    at = _skip_space(text, 0)
    if not text.startswith("{", at):
        return None
    at += 1
    try:
        while True:
            at = _skip_space(text, at)
            key, at = decoder.raw_decode(text, at)
            at = _skip_space(text, at)
            if not isinstance(key, str) or not text.startswith(":", at):
                return None
            value, at = decoder.raw_decode(text, _skip_space(text, at + 1))
            if key == "id":
                return value
            at = _skip_space(text, at)
            if not text.startswith(",", at):
                return None
            at += 1
    except (ValueError, RecursionError):  # the cut came first: no id to answer with
        return None


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def over_long_error(line: OverLong, limit: int) -> types.JSONRPCError:
    request_id = top_level_id(line.head)
    log.warning(
        "mcp_line_too_long",
        length=line.length,
        limit=limit,
        request_id=str(request_id)[:80] if request_id is not None else None,
        hint="raise HETRIEVER_MCP_MAX_LINE if such requests are meant",
    )
    return _error(
        request_id,
        types.INVALID_REQUEST,
        f"Invalid Request: the line of {line.length} bytes is over the "
        f"{limit}-byte limit (HETRIEVER_MCP_MAX_LINE)",
    )


def _clean(value: Any) -> tuple[Any, int]:
    """`value` with every lone surrogate in its strings (keys too) made U+FFFD; how many."""
    if isinstance(value, str):
        cleaned, n = _LONE_SURROGATE.subn(REPLACEMENT, value)
        return cleaned, n
    if isinstance(value, list):
        items = [_clean(v) for v in value]
        return [v for v, _ in items], sum(n for _, n in items)
    if isinstance(value, dict):
        out, total = {}, 0
        for key, item in value.items():
            new_key, n_key = _clean(key)
            out[new_key], n_item = _clean(item)
            total += n_key + n_item
        return out, total
    return value, 0


def _error(request_id: Any, code: int, message: str) -> types.JSONRPCError:
    valid_id = (
        request_id
        if isinstance(request_id, (str, int)) and not isinstance(request_id, bool)
        else None
    )
    return types.JSONRPCError(
        jsonrpc="2.0", id=valid_id, error=types.ErrorData(code=code, message=message)
    )


def read_message(line: bytes) -> types.JSONRPCMessage | types.JSONRPCError:
    """One line off the wire: the message it carries, or the error that answers it."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        text = line.decode("utf-8", errors="replace")
        log.warning("mcp_invalid_utf8", detail="bytes that are not UTF-8 read as U+FFFD")
    try:
        return types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValueError:
        pass  # the parser refuses lone surrogates: see what the line holds
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        log.warning("mcp_parse_error", error=str(exc)[:200], length=len(line))
        return _error(None, types.PARSE_ERROR, f"Parse error: {str(exc)[:200]}")
    data, replaced = _clean(data)
    if replaced:
        log.warning(
            "mcp_lone_surrogates", replaced=replaced, detail="lone UTF-16 surrogates read as U+FFFD"
        )
    request_id = data.get("id") if isinstance(data, dict) else None
    try:
        return types.jsonrpc_message_adapter.validate_python(data, by_name=False)
    except ValueError as exc:
        if _bad_params_only(data):
            log.warning(
                "mcp_invalid_params",
                request_id=str(request_id)[:80],
                method=str(data["method"])[:80],
            )
            return _error(
                request_id, types.INVALID_PARAMS, "Invalid params: params must be an object"
            )
        log.warning(
            "mcp_invalid_request",
            request_id=str(request_id)[:80],
            error=str(exc).splitlines()[0][:200],
        )
        return _error(
            request_id, types.INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message"
        )


def _bad_params_only(data: Any) -> bool:
    """A request that would be valid without its `params`: the params are what is wrong."""
    if not isinstance(data, dict) or "params" not in data or "id" not in data:
        return False
    rest = {k: v for k, v in data.items() if k != "params"}
    try:
        types.jsonrpc_message_adapter.validate_python(rest, by_name=False)
    except ValueError:
        return False
    return True


def _claim_stdio() -> tuple[BinaryIO, BinaryIO, Any]:
    """The wire (private duplicates of fd 0 and 1), and a function that puts them back."""
    sys.stdout.flush()
    wire_in, wire_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)

    def restore() -> None:
        with contextlib.suppress(OSError):
            os.dup2(wire_in, 0)
            os.dup2(wire_out, 1)

    # closefd=False: a reading thread may still block on the descriptor at exit.
    return (
        os.fdopen(wire_in, "rb", closefd=False),
        os.fdopen(wire_out, "wb", closefd=False),
        restore,
    )


@contextlib.asynccontextmanager
async def stdio_transport(
    stdin: BinaryIO | None = None, stdout: BinaryIO | None = None, max_line: int = DEFAULT_MAX_LINE
) -> AsyncIterator[tuple[Any, Any]]:
    """(read stream, write stream) for `Server.run`, over the process's stdio by default."""
    restore = None
    if stdin is None or stdout is None:
        stdin, stdout, restore = _claim_stdio()
    to_server, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, to_wire = anyio.create_memory_object_stream[SessionMessage](0)
    answers = write_stream.clone()  # the transport's own answers share the one writer
    wire_in, out = stdin, anyio.wrap_file(stdout)

    async def read_lines() -> None:
        async with to_server, answers:
            while True:
                # abandoned at shutdown: the thread may block on the descriptor till exit
                line = await anyio.to_thread.run_sync(
                    read_line, wire_in, max_line, abandon_on_cancel=True
                )
                if line is None:
                    break
                if isinstance(line, OverLong):
                    message: Any = over_long_error(line, max_line)
                elif not line.strip():
                    continue
                else:
                    message = read_message(line)
                target = answers if isinstance(message, types.JSONRPCError) else to_server
                await target.send(SessionMessage(message))

    async def write_lines() -> None:
        async with to_wire:
            async for session_message in to_wire:
                data = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await out.write(data.encode("utf-8", errors="replace") + b"\n")
                await out.flush()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_lines)
            tg.start_soon(write_lines)
            yield read_stream, write_stream
            tg.cancel_scope.cancel()
    finally:
        if restore is not None:
            restore()


async def serve_stdio(server: Any, max_line: int = DEFAULT_MAX_LINE) -> None:
    """Run an `MCPServer` over this transport (its own `run("stdio")` uses the SDK's)."""
    lowlevel = server._lowlevel_server  # what the SDK's run_stdio_async runs, too
    async with stdio_transport(max_line=max_line) as (read_stream, write_stream):
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
