"""A CLI ingest run as the fault tests drive it: a repository of small one-chunk pages, the
environment of a `hetriever` subprocess whose data lives in tmp_path, its JSON log read as it
comes, and the index held to a fresh full pass of the same commit (tests/e2e/)."""

from __future__ import annotations

import json
import os
import queue
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from hetriever.discover.repositories import discover_repositories
from hetriever.index.run_record import STATUS_COMPLETE
from hetriever.store.knowledge_store import Store
from tests.support.chroma_fixtures import store_settings
from tests.support.flow_support import fresh_full_pass, stored
from tests.support.helpers import commit_all, init_repo, run, write_files

REPO_NAME = "load-docs"
PAGES = 300  # one chunk each: two write windows of WINDOW chunks, a few seconds of embedding
WINDOW = 256  # HETRIEVER_WRITE_WINDOW in every run here, so a crash can fall between windows
RUN_TIMEOUT = 180.0  # no CLI run here may hang the suite
WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
    "november oscar papa quebec romeo sierra tango uniform victor whiskey xray"
).split()


def page_text(i: int, version: int) -> str:
    """A page with no title or description of its own (so no page record): one chunk."""
    rng = random.Random(i * 1000 + version)
    body = " ".join(rng.choice(WORDS) for _ in range(18))
    return f"---\nweight: {i}\n---\n\n{body} page{i} version{version}.\n"


def write_pages(repo: Path, n: int, version: int) -> str:
    """n small pages (one chunk each) at `version`; committed; returns the commit."""
    write_files(repo, {f"content/docs/page-{i:03d}.md": page_text(i, version) for i in range(n)})
    return commit_all(repo, f"pages v{version}")


def pages_repo(tmp_path: Path, n: int = PAGES) -> Path:
    """A git repo named load-docs (used directly as docs_root) with n pages committed."""
    repo = init_repo(tmp_path / REPO_NAME)
    write_pages(repo, n, 1)
    return repo


def the_repo(docs_root: Path, name: str = REPO_NAME):
    (repo,) = [r for r in discover_repositories(docs_root) if r.name == name]
    return repo


def cli_env(tmp_path: Path, model_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a CLI subprocess whose data lives in tmp_path (like store_settings)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HETRIEVER_")}
    env.update(
        HETRIEVER_CHROMA_PATH=str(tmp_path / "chroma"),
        HETRIEVER_STATE_DIR=str(tmp_path / "state"),
        HETRIEVER_MODEL_DIR=str(model_dir),
        HETRIEVER_FAULTS_STATE=str(tmp_path / "faults"),
        HETRIEVER_WRITE_WINDOW=str(WINDOW),
        HETRIEVER_LOG_FORMAT="json",
        # searches in their own process, as these tests measure them (no resident one)
        HETRIEVER_SEARCH_RESIDENT_IDLE="0",
    )
    env.update(extra)
    return env


def cli_command(docs_root: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "hetriever.cli", "--docs-root", str(docs_root), *args]


def run_cli(
    docs_root: Path, env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        cli_command(docs_root, *args),
        env=env,
        cwd=cwd or docs_root.parent,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )


def ingest_ok(docs_root: Path, env: dict[str, str]) -> list[dict]:
    done = run_cli(docs_root, env, "ingest", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    outcomes = json.loads(done.stdout)
    assert all(o["ok"] and o["completed"] for o in outcomes), outcomes
    return outcomes


class LogWatcher:
    """Reads a subprocess's JSON log lines (stderr) in a thread; waits for an event. A line
    of Prefect's log format counts by the JSON record it ends with."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, event: str, timeout: float = RUN_TIMEOUT) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(
                    f"process ended before {event!r}:\n" + "".join(self.lines)[-3000:]
                )
            self.lines.append(line)
            try:
                record = json.loads(line[line.find("{") :]) if "{" in line else {}
            except json.JSONDecodeError:
                continue
            if record.get("event") == event:
                return record
        raise AssertionError(f"no {event!r} within {timeout}s")

    def rest(self) -> str:
        self._thread.join(timeout=RUN_TIMEOUT)
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                self.lines.append(line)
        return "".join(self.lines)


def signal_when(proc: subprocess.Popen, event: str, sig: int, timeout: float = RUN_TIMEOUT) -> str:
    """Send `sig` to `proc` once it logs `event` and wait for it to end (killed if it has not
    within `timeout`); returns its log."""
    watcher = LogWatcher(proc)
    try:
        watcher.wait_for(event, timeout=timeout)
        proc.send_signal(sig)
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return watcher.rest()


def open_store(tmp_path: Path, embedder: Any, **overrides: Any) -> Store:
    return Store(store_settings(tmp_path, **overrides), embedder=embedder)


def assert_equals_fresh_pass(store: Store, docs_root: Path, model_dir: Path) -> dict:
    repo = the_repo(docs_root)
    from hetriever.discover.changes import head_commit

    commit = head_commit(repo)
    got = stored(store, REPO_NAME)  # also: BM25 holds exactly what Chroma holds
    assert got == fresh_full_pass(repo, commit, store.settings.replace(model_dir=model_dir))
    meta = run(store.get_collection_metadata(REPO_NAME))
    assert meta["commit_hash"] == commit and meta["index_status"] == STATUS_COMPLETE
    assert meta["total_chunks"] == len(got)
    return got
