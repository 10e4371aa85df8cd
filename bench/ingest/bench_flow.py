"""End-to-end ingest through the Prefect `ingest` flow, against the same work done in-process.

    python -m bench.ingest.bench_flow [--corpus hugo-docs] [--runner threads] [--runner threads:4] [--json]
    python -m bench.ingest.bench_flow --incremental-only --repeat 2   # lanes alternating, twice each
    python -m bench.ingest.bench_flow --full-only --server-not-niced  # the server at the flow's priority
    python -m bench.ingest.bench_flow --full-only --repeat 5  # five pairs, the median ratio

For each corpus (v1 and v2 of ../shared/corpora/<corpus>, committed into a throw-away source
repo and added as a submodule of a throw-away parent repo), every scenario gets fresh Chroma
and state directories:

- full v2: the `ingest` flow (once per `--runner`), and `index_repository` in-process;
- no-op: the same again on the same commit, flow and in-process;
- incremental v1 -> v2: index v1 (untimed), bump the submodule to v2, time the second run;
- fan-out only: parse/clean/chunk of every v2 file without a store, as the flow's per-file tasks,
  as one `process_file` call per file in-process, and as `index_repository`'s batched loop
  (`--fan-out-only` runs just this: no embedding, minutes instead of tens of minutes).

The flow runs against a temporary Prefect server started by
`prefect.testing.utilities.prefect_test_harness()` (SQLite in a temp dir, a local API server
subprocess), as the flow tests do. Model preparation, the model load and the token counter are
done before anything is timed (HETRIEVER_MODEL_DIR points at a prepared model).

Time shares come from wrapping the real functions for the duration of the run: the per-file
task body (`tasks.process.process_file`), parse/clean/chunk (`safe_process_text`), single-file
git reads, `plan`, and the store peers' methods (`StoreWrites.upsert_files` = embedding + Chroma/BM25
writes; the rest = metadata, listings, deletes). Embedding time is IndexResult.embedding_seconds.
"Prefect overhead" is reported two ways: flow wall time minus the in-process wall time for the
same scenario (the honest one), and the residual of the flow's wall time after the measured parts
(an underestimate with a thread runner, whose tasks overlap the writes).
CPU seconds (`bench/flow_probes.CpuMeter`): this process's and the harness's server process's
over each lane, then the server's CPU after the lane ends until it has been idle for longer than
its task run recorder's flush interval (its backlog of task-run events). The harness's server
gets deployments/server_settings.py and runs niced, as hetriever's stacks start it;
`--prefect-defaults` leaves Prefect's own settings and priority.
Corpora are looked up at $HETRIEVER_CORPORA, else ../shared/corpora beside the repository.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]

# No network here: keep Prefect's and Chroma's servers from trying to send telemetry.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "false")

from bench.flow_probes import CpuMeter, Probe, StackSampler, cpu_line, instrumented  # noqa: E402

CORPORA = Path(os.environ.get("HETRIEVER_CORPORA", REPO_ROOT.parent / "shared" / "corpora"))
NAMES = ("hugo-docs", "opentelemetry-io")


# --- git fixtures and environment -----------------------------------------------------


@dataclass
class Site:
    corpus: str
    parent: Path
    v1: str
    v2: str

    def checkout(self, sha: str) -> None:
        from tests.support.helpers import git, update_submodule

        sub = self.parent / "docs" / self.corpus
        if git(sub, "rev-parse", "HEAD") != sha:
            update_submodule(self.parent, self.corpus, sha)


def point_env_at(workdir: Path, parent: Path, model_dir: Path) -> None:
    """The flow reads its settings from the environment, as a deployment would."""
    from hetriever.store.knowledge_store import clear_store_cache

    clear_store_cache()
    os.environ.update(
        {
            "HETRIEVER_DOCS_ROOT": str(parent),
            "HETRIEVER_CHROMA_PATH": str(workdir / "chroma"),
            "HETRIEVER_STATE_DIR": str(workdir / "state"),
            "HETRIEVER_MODEL_DIR": str(model_dir),
        }
    )


def prepare_model_dir(given: str | None) -> Path:
    from hetriever.core.config import load_settings
    from hetriever.embed.model_build import prepare_model

    target = Path(given) if given else load_settings().resolved_model_dir
    return prepare_model(target)


def warm_up(model_dir: Path) -> None:
    """Load the model and the token counter once, so no scenario pays for them."""
    from hetriever.core.config import load_settings
    from hetriever.embed.embedder import get_embedder
    from hetriever.index.process import token_counter

    settings = load_settings().replace(model_dir=model_dir)
    get_embedder(settings).embed(["warm up the ONNX session"])
    token_counter(settings).count_batch(["warm up the tokenizer"])


# --- runs -----------------------------------------------------------------------------


@dataclass
class Run:
    corpus: str
    scenario: str  # "full v2", "noop v2", "incremental v1->v2"
    lane: str  # "flow[threads]" or "in-process"
    wall_s: float
    inner_s: float  # IndexResult.total_seconds (the repository's own run, without the parent flow)
    mode: str
    files_indexed: int
    chunks_written: int
    chunks_reused: int
    chunks_deleted: int
    embedding_s: float
    calls: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)


def _run_from(
    corpus: str,
    scenario: str,
    lane: str,
    wall: float,
    result: dict,
    probe: Probe,
    cpu: dict | None = None,
) -> Run:
    return Run(
        corpus=corpus,
        scenario=scenario,
        lane=lane,
        wall_s=round(wall, 3),
        inner_s=round(result.get("total_seconds", 0.0), 3),
        mode=result.get("mode", "?"),
        files_indexed=result.get("files_indexed", 0),
        chunks_written=result.get("chunks_written", 0),
        chunks_reused=result.get("chunks_reused", 0),
        chunks_deleted=result.get("chunks_deleted", 0),
        embedding_s=round(result.get("embedding_seconds", 0.0), 3),
        calls=dict(probe.calls),
        seconds={k: round(v, 3) for k, v in probe.seconds.items()},
        cpu=cpu or {},
    )


def run_flow(corpus: str, scenario: str, runner: str, probe: Probe) -> Run:
    from flows.ingest import ingest

    probe.reset()
    with instrumented(probe):
        meter = CpuMeter()
        start = time.perf_counter()
        state = asyncio.run(ingest(task_runner=runner, return_state=True))
        wall = time.perf_counter() - start
        meter.stop()
    summary = state.result(raise_on_failure=False)
    if not state.is_completed():
        raise SystemExit(f"the ingest flow did not complete: {state.message}: {summary}")
    (result,) = summary["repositories"]
    return _run_from(corpus, scenario, f"flow[{runner}]", wall, result, probe, meter.settle())


def run_in_process(corpus: str, scenario: str, probe: Probe) -> Run:
    from hetriever.core.config import load_settings
    from hetriever.discover.repositories import discover_repositories
    from hetriever.index.indexing import index_repository
    from hetriever.store.knowledge_store import get_knowledge_store

    settings = load_settings()
    (repo,) = [
        r
        for r in discover_repositories(settings.docs_root, content_dir=settings.content_dir)
        if r.name == corpus
    ]
    probe.reset()
    with instrumented(probe):
        meter = CpuMeter()
        start = time.perf_counter()
        result = asyncio.run(index_repository(repo, get_knowledge_store(settings), settings))
        wall = time.perf_counter() - start
        meter.stop()
    if not result.completed:
        raise SystemExit(f"in-process indexing of {corpus} did not complete: {result.failed}")
    return _run_from(corpus, scenario, "in-process", wall, result.to_dict(), probe, meter.settle())


def check_copy(corpus: str, setup: Run) -> None:
    """A copied v1 index must hold what the setup run wrote, or the incremental run is moot."""
    from hetriever.core.config import load_settings
    from hetriever.store.knowledge_store import get_knowledge_store

    count = asyncio.run(get_knowledge_store(load_settings()).count(corpus))
    if count != setup.chunks_written:
        raise SystemExit(
            f"copied v1 index of {corpus} holds {count} chunks, expected {setup.chunks_written}"
        )


def warm_up_flow(scratch: Path, model_dir: Path, runners: list[str]) -> None:
    """One untimed flow run per runner over the sample docs: the first run of a flow in a
    process pays for imports, client setup and registering the flow and tasks."""
    from tests.support.helpers import REPO_ROOT as TESTS_REPO_ROOT
    from tests.support.helpers import commit_all, init_repo

    root = scratch / "warm-up"
    if not root.exists():
        source = init_repo(root / "docs" / "sample-docs")
        shutil.copytree(TESTS_REPO_ROOT / "examples" / "sample-docs", source, dirs_exist_ok=True)
        commit_all(source, "sample docs")
    from flows.ingest import ingest

    for runner in runners:
        workdir = Path(tempfile.mkdtemp(prefix="warm-", dir=scratch))
        point_env_at(workdir, root / "docs", model_dir)
        state = asyncio.run(ingest(task_runner=runner, return_state=True))
        if not state.is_completed():
            raise SystemExit(f"the warm-up flow run failed: {state.message}")
        shutil.rmtree(workdir, ignore_errors=True)


@dataclass
class FanOut:
    """parse/clean/chunk of every v2 file, no store: the per-file fan-out on its own."""

    corpus: str
    lane: str  # "flow[<runner>]", "in-process per file" or "in-process batched"
    files: int
    wall_s: float
    per_file_ms: float
    calls: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    # the flow process's threads' CPU by part (StackSampler): the task bodies, Prefect's
    # submission, task engine, states and events, results and transactions, logging
    parts: dict[str, float] = field(default_factory=dict)


FLOW_LANES_ONLY = False  # --flow-lanes-only


def fan_out(
    corpus: str,
    runners: list[str],
    probe: Probe,
    say: Callable[[str], None],
    flow_lanes_only: bool = False,
) -> list[FanOut]:
    """The flow's fan-out (one process-file task per file) against the same work in-process:
    one `process_file` per file (a git read each, a resolver each), and the batched loop that
    `index_repository` runs (one git reader, one shared include resolver)."""
    from prefect import flow

    import hetriever.index.indexing as indexing
    import hetriever.index.process as process
    from flows.ingest import make_task_runner
    from flows.run_logs import prefect_run_logging
    from hetriever.core.config import load_settings
    from hetriever.discover.changes import head_commit, list_content_files
    from hetriever.discover.git_objects import read_content_files
    from hetriever.discover.repositories import discover_repositories
    from hetriever.index.indexing import FileWork
    from hetriever.index.process import IncludeResolver
    from tasks.process import map_with_tasks

    settings = load_settings()
    (repo,) = [r for r in discover_repositories(settings.docs_root) if r.name == corpus]
    commit = head_commit(repo)
    paths = list_content_files(repo, commit)

    @flow(name="bench-fan-out")
    async def fan_out_flow() -> int:
        # as the ingest flow does: one batched read, one include cache, the task-per-file
        # mapper, the run's logging (which drops each task run's routine "Finished" line)
        work = FileWork(repo, commit, settings, IncludeResolver(repo, commit, settings))
        files = read_content_files(repo, paths, commit, max_bytes=settings.max_file_bytes)
        with prefect_run_logging(settings.log_level, settings.log_format):
            return sum([1 async for _ in map_with_tasks(files, work)])

    def per_file() -> None:
        for p in paths:
            indexing.process_file(repo, p, commit, settings)

    def batched() -> None:
        resolver = IncludeResolver(repo, commit, settings)
        for p, text in read_content_files(repo, paths, commit, max_bytes=settings.max_file_bytes):
            if isinstance(text, str):
                # looked up on the module, so the probe sees it
                process.safe_process_text(repo, p, text, settings, resolver=resolver)

    lanes: list[tuple[str, Callable[[], Any]]] = [
        *(
            []
            if flow_lanes_only
            else [("in-process batched", batched), ("in-process per file", per_file)]
        ),
        *[
            (f"flow[{r}]", fan_out_flow.with_options(task_runner=make_task_runner(r)))
            for r in runners
        ],
    ]
    out = []
    for lane, fn in lanes:
        probe.reset()
        with instrumented(probe), StackSampler() as sampler:
            meter = CpuMeter()
            start = time.perf_counter()
            pending = fn()
            if asyncio.iscoroutine(pending):  # the async flow, called from sync code
                asyncio.run(pending)
            wall = time.perf_counter() - start
            meter.stop()
        cpu = meter.settle()
        out.append(
            FanOut(
                corpus,
                lane,
                len(paths),
                round(wall, 3),
                round(1000 * wall / max(1, len(paths)), 2),
                dict(probe.calls),
                {k: round(v, 3) for k, v in probe.seconds.items()},
                cpu,
                sampler.shares(),
            )
        )
        say(f"{corpus}: {'fan-out only':<20} {lane:<18} {wall:8.2f} s  {cpu_line(cpu)}")
        say(f"    CPU by part: {sampler.shares()} = {sampler.seconds()} s")
        say(f"    where: {sampler.top_places()}")
    return out


def bench_corpus(
    corpus: str,
    runners: list[str],
    scratch: Path,
    model_dir: Path,
    probe: Probe,
    say: Callable[[str], None],
    fan_out_only: bool,
    full_only: bool = False,
    incremental_only: bool = False,
    repeat: int = 1,
) -> tuple[list[Run], list[FanOut]]:
    from tests.support.helpers import build_corpus_parent

    parent, v1, v2 = build_corpus_parent(scratch / corpus, corpus)
    site = Site(corpus, parent, v1, v2)
    runs: list[Run] = []
    lanes: list[str | None] = [None, *runners]  # None = in-process
    warm_up_flow(scratch, model_dir, runners)

    def one(lane: str | None, scenario: str) -> Run:
        run = (
            run_in_process(corpus, scenario, probe)
            if lane is None
            else run_flow(corpus, scenario, lane, probe)
        )
        say(
            f"{corpus}: {scenario:<20} {run.lane:<18} {run.wall_s:8.2f} s  ({run.mode})  "
            f"{cpu_line(run.cpu)}  load {os.getloadavg()[0]:.1f}"
        )
        return run

    if fan_out_only:
        site.checkout(v2)
        point_env_at(Path(tempfile.mkdtemp(prefix="fan-", dir=scratch)), parent, model_dir)
        return runs, fan_out(corpus, runners, probe, say, FLOW_LANES_ONLY)

    if full_only:  # full v2 only, the lanes back to back in fresh directories, `repeat` pairs
        site.checkout(v2)
        for _ in range(repeat):
            for lane in lanes:
                workdir = Path(tempfile.mkdtemp(prefix="full-", dir=scratch))
                point_env_at(workdir, parent, model_dir)
                runs.append(one(lane, "full v2"))
                shutil.rmtree(workdir, ignore_errors=True)
        return runs, []

    # Incremental: v1 is indexed once (in-process, untimed) and its directories copied for
    # each lane, so every lane starts from the same index; then the v1 -> v2 run is timed.
    site.checkout(v1)
    base = scratch / f"{corpus}-v1-index"
    point_env_at(base, parent, model_dir)
    setup = one(None, "setup v1 (untimed)")
    point_env_at(scratch, parent, model_dir)  # closes the store, so the copies are complete
    site.checkout(v2)
    for _ in range(repeat):  # lanes alternate, so a change in the machine's load hits both
        for lane in lanes:
            workdir = Path(tempfile.mkdtemp(prefix="inc-", dir=scratch))
            shutil.copytree(base, workdir, dirs_exist_ok=True)
            point_env_at(workdir, parent, model_dir)
            check_copy(corpus, setup)
            runs.append(one(lane, "incremental v1->v2"))
            shutil.rmtree(workdir, ignore_errors=True)
    shutil.rmtree(base, ignore_errors=True)
    if incremental_only:
        return runs, []

    # Full v2 in fresh directories, then a no-op run on the same commit and directories.
    for lane in lanes:
        workdir = Path(tempfile.mkdtemp(prefix="full-", dir=scratch))
        point_env_at(workdir, parent, model_dir)
        runs.append(one(lane, "full v2"))
        runs.append(one(lane, "noop v2"))
        shutil.rmtree(workdir, ignore_errors=True)
    return runs, fan_out(corpus, runners, probe, say)


# --- report ---------------------------------------------------------------------------


def pair_ratios(runs: list[Run]) -> dict[str, dict[str, Any]]:
    """Flow wall / in-process wall for each in-process run and the flow run after it."""
    import statistics

    out: dict[str, dict[str, Any]] = {}
    for before, after in zip(runs, runs[1:]):
        if before.lane == "in-process" and after.lane != "in-process":
            if before.scenario == after.scenario and before.wall_s > 0:
                out.setdefault(after.scenario, {"ratios": []})["ratios"].append(
                    round(after.wall_s / before.wall_s, 3)
                )
    for entry in out.values():
        entry["median"] = statistics.median(entry["ratios"])
    return out


def shares(flow: Run, baseline: Run | None) -> dict[str, float]:
    """Seconds per part of one flow run's wall time (see the module docstring)."""
    s = flow.seconds
    task_body = s.get("task_body", 0.0)
    pcc = s.get("parse_clean_chunk", 0.0)
    embed = flow.embedding_s
    writes = max(0.0, s.get("store_write", 0.0) - embed)
    other = s.get("store_other", 0.0) + s.get("plan", 0.0)
    out = {
        "parse/clean/chunk (in tasks)": pcc,
        "git read per file (in tasks)": max(0.0, task_body - pcc),
        "embedding": embed,
        "chroma+bm25 writes": writes,
        "plan + store metadata/listing": other,
        "prefect residual": max(0.0, flow.wall_s - (task_body + embed + writes + other)),
    }
    if baseline is not None:
        out["prefect overhead vs in-process"] = flow.wall_s - baseline.wall_s
    return out


def report(runs: list[Run], fanouts: list[FanOut], skipped: list[str]) -> dict[str, Any]:
    by_key = {(r.corpus, r.scenario, r.lane): r for r in runs}
    derived: list[dict[str, Any]] = []
    for r in runs:
        if not r.lane.startswith("flow") or r.scenario != "full v2":
            continue
        base = by_key.get((r.corpus, "full v2", "in-process"))
        inc = by_key.get((r.corpus, "incremental v1->v2", r.lane))
        noop = by_key.get((r.corpus, "noop v2", r.lane))
        part = shares(r, base)
        derived.append(
            {
                "corpus": r.corpus,
                "lane": r.lane,
                "full_wall_s": r.wall_s,
                "tasks": r.calls.get("task_body", 0),
                "shares_s": {k: round(v, 2) for k, v in part.items()},
                "shares_pct": {k: round(100 * v / r.wall_s, 1) for k, v in part.items()},
                "per_task_overhead_ms": (
                    round(
                        1000
                        * part["prefect overhead vs in-process"]
                        / max(1, r.calls.get("task_body", 0)),
                        2,
                    )
                    if base
                    else None
                ),
                "incremental_over_full": round(inc.wall_s / r.wall_s, 3) if inc else None,
                "noop_s": noop.wall_s if noop else None,
            }
        )
    for corpus in sorted({r.corpus for r in runs}):
        base = by_key.get((corpus, "full v2", "in-process"))
        inc = by_key.get((corpus, "incremental v1->v2", "in-process"))
        noop = by_key.get((corpus, "noop v2", "in-process"))
        if base:
            derived.append(
                {
                    "corpus": corpus,
                    "lane": "in-process",
                    "full_wall_s": base.wall_s,
                    "incremental_over_full": round(inc.wall_s / base.wall_s, 3) if inc else None,
                    "noop_s": noop.wall_s if noop else None,
                }
            )
    return {
        "runs": [asdict(r) for r in runs],
        "derived": derived,
        "fan_out": [asdict(f) for f in fanouts],
        "skipped_corpora": skipped,
        "prefect_server": "prefect_test_harness() (temporary SQLite + local API server)",
        "cpus": len(os.sched_getaffinity(0)),
        "loadavg_1m_at_end": os.getloadavg()[0],
    }


def print_table(out: dict[str, Any]) -> None:
    header = (
        "corpus",
        "scenario",
        "lane",
        "mode",
        "wall s",
        "inner s",
        "files",
        "written",
        "reused",
        "deleted",
        "embed s",
        "tasks",
    )
    rows = [
        (
            r["corpus"],
            r["scenario"],
            r["lane"],
            r["mode"],
            f"{r['wall_s']:.2f}",
            f"{r['inner_s']:.2f}",
            r["files_indexed"],
            r["chunks_written"],
            r["chunks_reused"],
            r["chunks_deleted"],
            f"{r['embedding_s']:.2f}",
            r["calls"].get("task_body", "-"),
        )
        for r in out["runs"]
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in (header, *rows) if rows else ():
        print("  ".join(str(x).rjust(w) for x, w in zip(row, widths)))
    for r in out["runs"]:
        if r["cpu"]:
            print(f"{r['scenario']} {r['lane']}: {cpu_line(r['cpu'])}")
    for d in out["derived"]:
        print(
            f"\n{d['corpus']} {d['lane']}: full v2 {d['full_wall_s']:.2f} s; "
            f"incremental/full {d['incremental_over_full']}; no-op {d['noop_s']} s"
        )
        if "shares_s" not in d:
            continue
        print(
            f"  {d['tasks']} files processed in task runs; overhead vs in-process "
            f"{d['per_task_overhead_ms']} ms per file"
        )
        print(
            "  (in-task parts are summed over concurrent task threads, waits for the CPU and "
            "the GIL included:\n   they can exceed the wall time; the overhead vs in-process "
            "is the figure to trust)"
        )
        for name, seconds in d["shares_s"].items():
            print(f"  {name:<32} {seconds:8.2f} s  {d['shares_pct'][name]:6.1f} %")
    if out["fan_out"]:
        print("\nfan-out only (parse/clean/chunk of every v2 file, no store):")
    for f in out["fan_out"]:
        print(
            f"  {f['corpus']} {f['lane']:<22} {f['wall_s']:8.2f} s  {f['per_file_ms']:7.2f} "
            f"ms/file  single-file git reads {f['calls'].get('git_read_single', 0)}"
        )
    print(
        f"\nPrefect server: {out['prefect_server']}; {out['cpus']} CPUs, shared and noisy "
        f"(load {out['loadavg_1m_at_end']:.1f} at the end); one run per scenario."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--corpus",
        action="append",
        choices=NAMES,
        help="corpus to run (repeatable; default hugo-docs)",
    )
    parser.add_argument(
        "--runner", action="append", help='flow task runner spec (repeatable; default "threads")'
    )
    parser.add_argument("--model-dir", help="prepared model dir (default: the settings' one)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--fan-out-only",
        action="store_true",
        help="only the per-file fan-out (no embedding, no store): minutes less",
    )
    parser.add_argument(
        "--full-only",
        action="store_true",
        help="only the full v2 ingest, in-process then flow, back to back",
    )
    parser.add_argument(
        "--incremental-only",
        action="store_true",
        help="only the incremental v1 -> v2 run, in-process then flow",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="incremental (or, with --full-only, full) runs per lane, the lanes alternating "
        "(default 1)",
    )
    parser.add_argument(
        "--server-not-niced",
        action="store_true",
        help="the harness's server at this process's priority (to compare)",
    )
    parser.add_argument(
        "--prefect-defaults",
        action="store_true",
        help="the harness's server without deployments/server_settings.py "
        "(Prefect's settings, not niced)",
    )
    parser.add_argument(
        "--flow-lanes-only",
        action="store_true",
        help="with --fan-out-only: only the flow's lanes (their parts sampled)",
    )
    args = parser.parse_args(argv)
    global FLOW_LANES_ONLY
    FLOW_LANES_ONLY = args.flow_lanes_only
    corpora = args.corpus or ["hugo-docs"]
    runners = args.runner or ["threads"]

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    present, skipped = [], []
    for corpus in corpora:
        if all((CORPORA / corpus / v).is_dir() for v in ("v1", "v2")):
            present.append(corpus)
        else:
            skipped.append(corpus)
            say(f"skipping {corpus}: v1/v2 not found under {CORPORA / corpus}")
    if not present:
        print(
            json.dumps({"runs": [], "skipped_corpora": skipped})
            if args.json
            else "no corpus present; nothing measured"
        )
        return 0

    from prefect.testing.utilities import prefect_test_harness

    if not args.prefect_defaults:  # the server as hetriever's stacks start it
        from deployments.server_settings import apply_server_settings

        apply_server_settings()

    model_dir = prepare_model_dir(args.model_dir)
    warm_up(model_dir)
    probe = Probe()
    runs: list[Run] = []
    fanouts: list[FanOut] = []
    scratch = Path(tempfile.mkdtemp(prefix="bench-flow-"))
    try:
        with prefect_test_harness(server_startup_timeout=120):
            if not (args.prefect_defaults or args.server_not_niced):  # as the stacks start it
                from bench.flow_probes import server_pid
                from deployments.server_settings import lower_priority

                pid = server_pid()
                if pid is not None:
                    lower_priority(pid)
            for corpus in present:
                got, fans = bench_corpus(
                    corpus,
                    runners,
                    scratch,
                    model_dir,
                    probe,
                    say,
                    args.fan_out_only,
                    args.full_only,
                    args.incremental_only,
                    max(1, args.repeat),
                )
                runs += got
                fanouts += fans
    finally:
        from hetriever.store.knowledge_store import clear_store_cache

        clear_store_cache()
        shutil.rmtree(scratch, ignore_errors=True)
    out = report(runs, fanouts, skipped)
    out["pair_ratios"] = pair_ratios(runs)
    for scenario, ratios in out["pair_ratios"].items():
        say(
            f"{scenario}: flow / in-process per pair "
            + ", ".join(f"{r:.3f}" for r in ratios["ratios"])
            + f"; median {ratios['median']:.3f}"
        )
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print_table(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
