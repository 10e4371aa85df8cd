"""The resident search process itself (`hetriever.commands.resident` says what it is for).

`python -m hetriever.commands.resident_server --key KEY [--docs-root D] [--chroma-path C]`,
started by `hetriever search` from the same directory and environment. It exits at once when
its settings do not hash to KEY or another process already serves KEY; otherwise it loads the
store and the model, searches once, then answers on its socket until idle.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import socket
import sys
import time
from typing import Any

from hetriever.commands import resident

CHECK_INTERVAL = 2.0  # seconds between looks at the idle clock, the index and the socket
REQUEST_TIMEOUT = 10.0  # seconds a connected client has to send its request
WARM_UP_QUERY = "getting started guide"


class Resident:
    def __init__(self, args: argparse.Namespace, settings: Any, key: str) -> None:
        self.args, self.settings, self.key = args, settings, key
        self.settings_key = resident.settings_key(settings)
        self.path = resident.socket_path(key)
        self.idle = float(settings.search_resident_idle)
        self.last_request = time.monotonic()
        self.inode: int | None = None
        self.stopping = ""

    # -- life -----------------------------------------------------------------------

    def warm_up(self) -> None:
        """Load what every search needs before the first one arrives."""
        import asyncio

        from hetriever.core.config import ACCESS_LEVELS
        from hetriever.search.hybrid import retrieve
        from hetriever.search.request import SearchRequest
        from hetriever.store.knowledge_store import get_knowledge_store

        store = get_knowledge_store(self.settings)
        store.embedder.embed(["warm up"])
        asyncio.run(
            retrieve(store, SearchRequest(WARM_UP_QUERY, access_levels=sorted(ACCESS_LEVELS)))
        )

    def bind(self) -> socket.socket:
        self.path.unlink(missing_ok=True)  # a process that held the lock before us is gone
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        mask = os.umask(0o177)  # created 0600: nobody else may even connect
        try:
            listener.bind(str(self.path))
        finally:
            os.umask(mask)
        listener.listen(8)
        listener.settimeout(CHECK_INTERVAL)
        self.inode = self.path.stat().st_ino
        return listener

    def should_stop(self) -> str:
        if self.stopping:
            return self.stopping
        if time.monotonic() - self.last_request > self.idle:
            return "idle"
        try:
            if self.path.stat().st_ino != self.inode:
                return "socket replaced"
        except FileNotFoundError:
            return "socket removed"
        from hetriever.commands.common import index_problem

        return "index gone" if index_problem(self.settings) else ""

    def serve(self, listener: socket.socket) -> str:
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                reason = self.should_stop()
                if reason:
                    return reason
                continue
            with conn:
                self.last_request = time.monotonic()
                self.handle(conn)
                self.last_request = time.monotonic()
            if self.stopping:
                return self.stopping

    def close(self, listener: socket.socket) -> None:
        listener.close()
        try:
            if self.path.stat().st_ino == self.inode:
                self.path.unlink()
                for suffix in (".log", ".lock"):  # ours while we hold the lock
                    self.path.with_suffix(suffix).unlink(missing_ok=True)
        except FileNotFoundError:
            pass

    # -- one request ----------------------------------------------------------------

    def handle(self, conn: socket.socket) -> None:
        conn.settimeout(REQUEST_TIMEOUT)
        try:
            uid = resident.peer_uid(conn)
            if uid is not None and uid != os.getuid():
                return
            message = resident._receive(conn)
            if not isinstance(message, dict) or message.get("key") != self.key:
                resident._send(conn, {"ok": False, "key": self.key, "error": "another index"})
                return
            conn.settimeout(None)
            resident._send(conn, {**self.answer(message), "key": self.key})
        except (OSError, ValueError):
            return  # the client went away or spoke nonsense: it searches in-process

    def answer(self, message: dict[str, Any]) -> dict[str, Any]:
        if message.get("op") == "ping":
            left = self.idle - (time.monotonic() - self.last_request)
            return {"ok": True, "pid": os.getpid(), "idle_left": round(max(left, 0.0))}
        if message.get("op") != "search" or not isinstance(message.get("request"), dict):
            return {"ok": False, "error": "unknown request"}
        from hetriever.commands.common import index_location, location_note
        from hetriever.commands.search import result_links, search_here

        if self.settings_changed():
            self.stopping = "settings changed"
            return {"ok": False, "error": "settings changed"}
        try:
            result, warnings = search_here(
                self.settings, message["request"], cold=False, note=False
            )
            links = result_links(result, self.settings)
        except Exception as exc:  # the CLI searches in-process and reports it its own way
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        if warnings:  # a damaged BM25 file, a partial index: what a long-lived store holds
            # of them may be older than the files, so this process steps aside and the CLI
            # searches in-process, where a repaired index is seen at once
            self.stopping = "degraded index"
            return {"ok": False, "error": "degraded index: searched in-process"}
        return {
            "ok": True,
            "result": result.to_dict(),
            "warnings": warnings,
            "links": links,
            "note": location_note(self.settings),
            "index": index_location(self.settings),
        }

    def settings_changed(self) -> bool:
        """Settings loaded now differ from this process's (a default that depends on what
        the working directory holds, say): it must not answer, and stops."""
        from hetriever.core.config import load_settings

        try:
            fresh = load_settings(
                **{
                    name: getattr(self.args, name)
                    for name in ("docs_root", "chroma_path")
                    if getattr(self.args, name, None)
                }
            )
        except Exception:
            return True
        return resident.settings_key(fresh) != self.settings_key


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hetriever-resident-search")
    parser.add_argument("--key", required=True)
    parser.add_argument("--docs-root")
    parser.add_argument("--chroma-path")
    args = parser.parse_args(argv)
    args.quiet = True
    from hetriever.commands.common import cli_settings

    settings = cli_settings(args)
    key = resident.args_key(args)
    if key != args.key or not resident.enabled(settings):
        print("resident search: settings differ from the starting command's", file=sys.stderr)
        return 0
    path = resident.socket_path(key)
    lock = open(path.with_suffix(".lock"), "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another resident process serves these settings
    os.chmod(lock.name, 0o600)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop the way idleness does
    server = Resident(args, settings, key)
    server.warm_up()
    listener = server.bind()
    try:
        reason = server.serve(listener)
    finally:
        server.close(listener)
    print(f"resident search: stopped ({reason})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
