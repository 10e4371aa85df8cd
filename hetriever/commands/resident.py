"""The resident search process: `hetriever search` at the prompt without loading anything.

A search at the prompt is ~15 ms of work behind ~2 s of imports and loading (Chroma, the
model, the BM25 index). After a search that ran in its own process, the CLI starts a
resident process for the same settings; it loads everything once and answers later searches
over a unix socket until it has been idle `search_resident_idle` seconds. A search it answers
runs the very code an in-process one runs (`commands.search.search_here`: the same checks,
store, access levels, warnings and links), so the printed output is the same; the CLI prints
it with its usual code.

- Which index: the socket's name is a hash of what the settings are made from (environment,
  config file, working directory, command line) and of the installed code; each request
  carries that key and the process answers only its own, and only while settings loaded
  afresh equal its own: never for another index, other settings or old code.
- Who may ask: the socket is created 0600 in a 0700 directory of the user's own (checked), and
  the process answers only a peer of its own uid (SO_PEERCRED where the system has it).
- Never stale: one long-lived store, as `hetriever serve` keeps: a finished ingest's BM25
  generation makes it reopen Chroma, and searches follow the catalog's alias epoch, so the next
  search sees it. It stops when its index is gone or its socket was replaced.
- Anything else (no process, a refused or broken answer, an error in the request) and the CLI
  searches in-process as it always did, with that path's own error messages.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

REPLY_TIMEOUT = 120.0  # seconds a search may take in the resident before the CLI gives up
CONNECT_TIMEOUT = 1.0
MAX_MESSAGE = 64 * 1024 * 1024  # a reply holds up to max_top_k results with their passages


# What settings are made from, besides the command line: the environment's variables of
# hetriever (any case: pydantic-settings reads them so), of Chroma and of the places a
# default index or model lives; the config file; the working directory.
_ENV_PREFIXES = (
    "HETRIEVER_",
    "USE_HYBRID_SEARCH",
    "CHROMA_",
    "ANONYMIZED_TELEMETRY",
    "XDG_",
    "HOME",
    "OMP_",
    "ORT_",
    "PYTHON",
)


def inputs_key(docs_root: str | None, chroma_path: str | None) -> str:
    """The socket's key: a hash of everything a search's settings are made from, and of the
    installed code, computed without loading the settings (that alone costs a search at the
    prompt a third of its time). The resident process also checks, per search, that settings
    loaded afresh still equal its own (`settings_key`)."""
    env = {k: v for k, v in os.environ.items() if k.upper().startswith(_ENV_PREFIXES)}
    config = os.environ.get("HETRIEVER_CONFIG") or "hetriever.toml"
    try:
        config_text = hashlib.sha256(Path(config).read_bytes()).hexdigest()
    except OSError:
        config_text = ""
    fields = {
        "env": env,
        "config": str(Path(config).absolute()),
        "config_text": config_text,
        "cwd": os.getcwd(),
        "docs_root": docs_root,
        "chroma_path": chroma_path,
        "python": sys.executable,
        "code": _code_version(),
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def settings_key(settings: Any) -> str:
    """A hash of loaded settings (every field, paths made absolute, secrets included)."""
    from pydantic import SecretStr

    def plain(value: Any) -> Any:
        if isinstance(value, SecretStr):
            return value.get_secret_value()
        if isinstance(value, Path):
            return str(value.absolute())
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if hasattr(value, "model_dump"):
            return plain({k: getattr(value, k) for k in type(value).model_fields})
        return value

    fields = {name: plain(getattr(settings, name)) for name in type(settings).model_fields}
    fields["state"] = str(settings.resolved_state_dir.absolute())
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()


def args_key(args: Any) -> str:
    return inputs_key(getattr(args, "docs_root", None), getattr(args, "chroma_path", None))


def _code_version() -> str:
    """The installed hetriever's modules, by name, size and modification time: a process
    started before an upgrade (or an edit of a checkout) is not asked."""
    root = Path(__file__).resolve().parent.parent
    parts = []
    for folder, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                info = os.stat(os.path.join(folder, name))
                parts.append(f"{folder[len(str(root)) :]}/{name}:{info.st_size}:{info.st_mtime_ns}")
    return hashlib.sha256("\n".join(sorted(parts)).encode()).hexdigest()


def runtime_dir() -> Path:
    """The user's own 0700 directory for the sockets (a unix socket's path is limited to
    ~100 bytes, too few for a state directory deep in a tree)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"hetriever-{os.getuid()}"


def _own_private_dir(directory: Path, create: bool) -> bool:
    if create:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        info = directory.lstat()
    except FileNotFoundError:
        return False
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.getuid()
        and stat.S_IMODE(info.st_mode) & 0o077 == 0
    )


def socket_path(key: str) -> Path:
    return runtime_dir() / f"search-{key[:32]}.sock"


def enabled(settings: Any) -> bool:
    return settings.search_resident_idle > 0


# --- the CLI's side --------------------------------------------------------------------


def _exchange(key: str, message: dict[str, Any], timeout: float) -> dict[str, Any] | None:
    """One request to the resident process for `key`; None when none answers."""
    path = socket_path(key)
    if not _own_private_dir(path.parent, create=False):
        return None
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid():
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(CONNECT_TIMEOUT)
            conn.connect(str(path))
            conn.settimeout(timeout)
            _send(conn, {**message, "key": key})
            reply = _receive(conn)
    except (OSError, ValueError):
        return None
    if not isinstance(reply, dict) or reply.get("key") != key:
        return None
    return reply


def ask(args: Any, request: dict[str, Any]) -> dict[str, Any] | None:
    """The resident process's answer to a search `request` (the search's arguments as the
    command line gave them): {"result", "warnings", "links", "note", "index"}, or None
    (search in-process)."""
    reply = _exchange(args_key(args), {"op": "search", "request": request}, REPLY_TIMEOUT)
    return reply if reply is not None and reply.get("ok") else None


def describe(args: Any, settings: Any) -> dict[str, Any]:
    """Which way a search with these arguments and settings goes, for `status`."""
    if not enabled(settings):
        return {"route": "in-process", "why": "search_resident_idle is 0"}
    reply = _exchange(args_key(args), {"op": "ping"}, 5.0)
    if reply is None or not reply.get("ok"):
        return {
            "route": "in-process",
            "why": "no resident search process runs; the next search starts one",
        }
    return {
        "route": "resident",
        "pid": reply.get("pid"),
        "stops_after_idle_s": reply.get("idle_left"),
    }


def start(args: Any, settings: Any) -> None:
    """Start the resident process for these settings in the background (it stops at once
    when another already runs for them)."""
    import subprocess

    if not enabled(settings) or not _own_private_dir(runtime_dir(), create=True):
        return
    key = args_key(args)
    if _starting_or_running(key):
        return
    command = [sys.executable, "-m", "hetriever.commands.resident_server", "--key", key]
    for option in ("docs_root", "chroma_path"):
        if getattr(args, option, None):
            command += [f"--{option.replace('_', '-')}", str(getattr(args, option))]
    log = socket_path(key).with_suffix(".log")
    try:
        with open(log, "wb") as out:
            os.chmod(log, 0o600)
            subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
                close_fds=True,
            )
    except OSError:
        return  # a search without its resident is still a search


def _starting_or_running(key: str) -> bool:
    """A resident process holds the lock of `key` from its start (still loading, say)."""
    import fcntl

    try:
        with open(socket_path(key).with_suffix(".lock"), "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return True
            fcntl.flock(lock, fcntl.LOCK_UN)
    except OSError:
        return False
    return False


# --- the wire: one JSON object each way, length first ----------------------------------


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode("utf-8")
    conn.sendall(struct.pack("!I", len(data)) + data)


def _receive(conn: socket.socket) -> Any:
    size = struct.unpack("!I", _read(conn, 4))[0]
    if size > MAX_MESSAGE:
        raise ValueError("message too large")
    return json.loads(_read(conn, size))


def _read(conn: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = conn.recv(min(left, 1 << 20))
        if not chunk:
            raise ValueError("connection closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def peer_uid(conn: socket.socket) -> int | None:
    """The connecting process's uid, where the system says (Linux)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    _pid, uid, _gid = struct.unpack(
        "3i", conn.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    )
    return uid
