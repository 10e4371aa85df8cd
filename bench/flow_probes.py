"""What bench_flow.py measures besides wall time: cumulative time in real functions (wrapped
for the duration of a run) and CPU seconds of this process against the Prefect server's."""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# --- probes: cumulative time spent in real functions -----------------------------------


class Probe:
    """Counts calls and sums durations per label; thread-safe (task bodies run in threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: dict[str, int] = {}
        self.seconds: dict[str, float] = {}

    def add(self, label: str, seconds: float) -> None:
        with self._lock:
            self.calls[label] = self.calls.get(label, 0) + 1
            self.seconds[label] = self.seconds.get(label, 0.0) + seconds

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
            self.seconds.clear()

    def get(self, label: str) -> float:
        return self.seconds.get(label, 0.0)

    def wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(label, time.perf_counter() - start)

        return timed


def store_parts() -> list[tuple[Any, str, str]]:
    """The store peers' methods timed: the write (embedding + Chroma/BM25) and the rest."""
    from hetriever.store.reads import StoreReads
    from hetriever.store.views import RepositoryViews
    from hetriever.store.writes import StoreWrites

    other = [
        (StoreWrites, "delete_file"),
        (StoreWrites, "delete_files"),
        (StoreWrites, "ensure_collection"),
        (StoreWrites, "update_collection_metadata"),
        (StoreReads, "list_files"),
        (StoreReads, "count"),
        (RepositoryViews, "info"),
    ]
    return [
        (StoreWrites, "upsert_files", "store_write"),
        *[(owner, name, "store_other") for owner, name in other],
    ]


@contextmanager
def instrumented(probe: Probe) -> Iterator[None]:
    """Wrap the pipeline's functions where their callers look them up (module globals)."""
    import hetriever.index.indexing as indexing
    import hetriever.index.process as process
    import tasks.process

    patches: list[tuple[Any, str, str]] = [
        (tasks.process, "process_file", "task_body"),
        (process, "safe_process_text", "parse_clean_chunk"),
        (process, "read_content_file", "git_read_single"),
        (indexing, "plan", "plan"),
        *store_parts(),
    ]
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    try:
        for (owner, name, label), (_, _, original) in zip(patches, originals):
            setattr(owner, name, probe.wrap(label, original))
        yield
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


# --- CPU accounting: this process against the Prefect server's -------------------------


def server_pid() -> int | None:
    """The harness's API server subprocess (None outside the harness)."""
    from prefect.server.api.server import SubprocessASGIServer

    process = getattr(SubprocessASGIServer._instances.get(None), "server_process", None)
    return process.pid if process is not None else None


def cpu_of(pid: int | None) -> float:
    """User + system CPU seconds of a process so far (0 if unknown)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds of this process and of the Prefect server over a lane, and how long the
    server stays busy after the lane ends (its backlog of events)."""

    def __init__(self) -> None:
        self.pid = server_pid()
        self.own0, self.server0 = time.process_time(), cpu_of(self.pid)
        self.own = self.server = 0.0

    def stop(self) -> None:
        self.own = time.process_time() - self.own0
        self.server = cpu_of(self.pid) - self.server0

    def settle(self, quiet: float = 0.05, step: float = 0.5, limit: float = 120.0) -> dict:
        """Wait until the server has used less than `quiet` CPU seconds per `step` for longer
        than its task run recorder's flush interval (a batch may wait that long)."""
        flush = float(os.environ.get("PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL", 5))
        start, before = time.perf_counter(), cpu_of(self.pid)
        last, busy_until = before, start
        while self.pid is not None and time.perf_counter() - start < limit:
            time.sleep(step)
            now, at = cpu_of(self.pid), time.perf_counter()
            if now - last >= quiet:
                busy_until = at
            elif at - busy_until > flush + step:
                break
            last = now
        return {
            "flow_process_cpu_s": round(self.own, 2),
            "server_cpu_s": round(self.server, 2),
            "server_cpu_after_s": round(cpu_of(self.pid) - before, 2),
            "server_busy_after_s": round(busy_until - start, 1),
        }


def cpu_line(cpu: dict) -> str:
    if not cpu:
        return ""
    return (
        f"cpu: this process {cpu['flow_process_cpu_s']:.1f} s, server "
        f"{cpu['server_cpu_s']:.1f} s (+{cpu['server_cpu_after_s']:.1f} s in "
        f"{cpu['server_busy_after_s']:.1f} s after)"
    )


# --- where the flow process's threads are: stacks sampled every few milliseconds ------------

# Innermost first, the first frame whose file matches names the part; frames of neutral
# libraries (pydantic, asyncio, the standard library) pass the sample on to their caller.
PARTS = (
    ("task body", ("/hetriever/", "/tasks/process.py:process_files_task")),
    (
        "results and transactions",
        (
            "/prefect/results.py",
            "/prefect/transactions.py",
            "/prefect/cache_policies.py",
            "/prefect/locking/",
        ),
    ),
    (
        "states and events",
        (
            "/prefect/states.py",
            "/prefect/events/",
            "/prefect/utilities/engine.py",
            "/prefect/client/schemas/",
        ),
    ),
    ("logging", ("/prefect/logging/",)),
    (
        "task submission",
        (
            "/prefect/task_runners.py",
            "/prefect/futures.py",
            "/prefect/tasks.py",
            "/tasks/process.py",
        ),
    ),
    (
        "task engine",
        ("/prefect/task_engine.py", "/prefect/context.py", "/prefect/utilities/callables.py"),
    ),
    ("other Prefect", ("/prefect/",)),
)
# The innermost Python frame of a thread blocked in C (a lock, a queue, a selector).
WAITING = {
    "wait",
    "acquire",
    "select",
    "poll",
    "sleep",
    "get",
    "_wait_for_tstate_lock",
    "recv",
    "recv_into",
    "accept",
    "read",
    "readinto",
    "_worker",
    "run_forever",
}


def part_of(frame: Any) -> tuple[str, str] | None:
    """The part a sampled stack belongs to and the frame that decided it (file:function);
    None for a thread that waits."""
    if frame.f_code.co_name in WAITING:
        return None
    inner = f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_code.co_name}"
    while frame is not None:
        where = f"{frame.f_code.co_filename}:{frame.f_code.co_name}"
        for part, needles in PARTS:
            if any(needle in where for needle in needles):
                return part, f"{where.split('/site-packages/')[-1]} (in {inner})"
        frame = frame.f_back
    return "other", inner


class StackSampler:
    """CPU time of this process's threads by part: every `interval` seconds each thread's CPU
    time since the last look (/proc/self/task/<tid>/schedstat) is put down to the part its
    stack is in now. A thread's state alone would not do: on a busy machine a thread that
    has just made a system call waits runnable for a core, and would be counted there."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.counts: dict[str, float] = {}  # part -> CPU seconds
        self.places: dict[str, float] = {}  # "part | file:function (in innermost)" -> seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stack-sampler", daemon=True)

    @staticmethod
    def _cpu_ns(native_id: int | None) -> int:
        try:
            return int(Path(f"/proc/self/task/{native_id}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return 0

    def _run(self) -> None:
        import sys

        me = threading.get_ident()
        last: dict[int, int] = {}
        while not self._stop.wait(self.interval):
            frames = sys._current_frames()
            for thread in threading.enumerate():
                frame = frames.get(thread.ident or -1)
                if thread.ident == me or frame is None or thread.native_id is None:
                    continue
                now = self._cpu_ns(thread.native_id)
                used = (now - last.get(thread.native_id, now)) / 1e9
                last[thread.native_id] = now
                if used <= 0:
                    continue
                found = part_of(frame)
                part, place = found if found is not None else ("waiting", "")
                self.counts[part] = self.counts.get(part, 0.0) + used
                key = f"{part} | {place}"
                self.places[key] = self.places.get(key, 0.0) + used

    def __enter__(self) -> StackSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def top_places(self, count: int = 12) -> dict[str, float]:
        total = sum(self.places.values()) or 1
        ranked = sorted(self.places.items(), key=lambda kv: -kv[1])[:count]
        return {place: round(n / total, 3) for place, n in ranked}

    def seconds(self) -> dict[str, float]:
        return {
            part: round(cpu, 2) for part, cpu in sorted(self.counts.items(), key=lambda kv: -kv[1])
        }

    def shares(self) -> dict[str, float]:
        total = sum(self.counts.values()) or 1
        return {
            part: round(count / total, 3)
            for part, count in sorted(self.counts.items(), key=lambda kv: -kv[1])
        }
