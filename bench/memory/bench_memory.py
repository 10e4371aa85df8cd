"""Peak RSS and wall time of real `hetriever` CLI processes: full and incremental ingests, search.

    python -m bench.memory.bench_memory [--corpus hugo-docs] [--search-chunks 100000] [--json]
    HETRIEVER_EMBEDDING_PRECISION=int8 python -m bench.memory.bench_memory   # the int8 model
    python -m bench.memory.bench_memory --engine prefect --search-chunks 0   # ingests through the flow
    python -m bench.memory.bench_memory --many sample     # 1 vs 10 copies of the sample docs
    python -m bench.memory.bench_memory --many corpora    # hugo-docs + the whole opentelemetry.io site

With `--engine prefect` the ingests run the Prefect flow; without PREFECT_API_URL, the CLI
starts a temporary server (deployments/temporary_server.py) as a child process, and `ru_maxrss`
is then the larger of the two processes' peaks (the server's stays below the flow's).

Each figure is one child process (`hetriever ingest`, `hetriever search`) started with the
settings in its environment, as a user would run it; its peak resident set size is the
kernel's `ru_maxrss` for that child (os.wait4), the same figure `/usr/bin/time -v` prints.

- full: each v2 corpus (committed into a throw-away repo, a submodule of a throw-away parent,
  as bench_flow does) into fresh Chroma and state directories;
- incremental: hugo-docs v1 into fresh directories, then v2 over it; the budget is the share
  of chunks the v2 run embedded times the full v2 run's wall time, plus 5 s;
- search: `hetriever search` (hybrid) over the full hugo-docs index, and over an index padded
  to --search-chunks with copies of its chunks (their vectors plus noise, ~10% of the words
  dropped, written straight to Chroma and BM25 as bench_store does: embedding 100k chunks here
  would take an hour), then the same searches with the vectors served by `chroma run` over
  that directory (the searching process's peak, and the server's).

- many (`--many`): one `hetriever ingest` over a folder of git repositories, with each
  repository's resident set after it is done and let go (the `repository_released` log
  line); `sample`: the bundled sample docs once and as ten repositories; `corpora`: hugo-docs
  v2 and the 11-language opentelemetry.io site (`opentelemetry-io/v2-site`) in one run, then
  each alone.

Corpora are looked up at $HETRIEVER_CORPORA, else ../shared/corpora beside the repository.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("ANONYMIZED_TELEMETRY", "false")

HETRIEVER = Path(sys.executable).with_name("hetriever")
NAMES = ("hugo-docs", "opentelemetry-io")
QUERIES = (
    "how do I filter a collection with where",
    "shortcode parameters",
    "configure the collector exporter",
)


def run_child(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run one CLI process, reaped here so ru_maxrss is this child's alone: its wall time,
    peak RSS (MB) and parsed --json output."""
    began = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [str(HETRIEVER), *args], env={**os.environ, **env}, stdout=out, stderr=err, text=True
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - began
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode:
        raise SystemExit(
            f"`hetriever {' '.join(args)}` failed ({proc.returncode}):\n{stderr[-2000:]}"
        )
    try:
        parsed = json.loads(stdout)
    except ValueError:
        parsed = None
    released = [
        json.loads(line)
        for line in stderr.splitlines()
        if line.startswith("{") and '"repository_released"' in line
    ]
    return {
        "wall_s": round(wall, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "output": parsed,
        "after_each": [
            {k: r.get(k) for k in ("repository", "rss_mb", "peak_rss_mb")} for r in released
        ],
    }


def env_for(workdir: Path, parent: Path) -> dict[str, str]:
    return {
        "HETRIEVER_DOCS_ROOT": str(parent),
        "HETRIEVER_CHROMA_PATH": str(workdir / "chroma"),
        "HETRIEVER_STATE_DIR": str(workdir / "state"),
        "HETRIEVER_LOG_LEVEL": "WARNING",
    }


def ingest_counts(result: dict[str, Any]) -> dict[str, Any]:
    (outcome,) = result["output"] if isinstance(result["output"], list) else [result["output"]]
    return {
        k: outcome.get(k)
        for k in ("mode", "chunks_written", "chunks_reused", "chunks_deleted", "embedding_seconds")
    }


def pad_index(workdir: Path, repository: str, total: int) -> int:
    """Add copies of the repository's chunks until it holds `total`; returns the count."""
    import numpy as np

    from hetriever.core.config import load_settings
    from hetriever.core.names import content_hash
    from hetriever.store.knowledge_store import Store

    settings = load_settings(env={k: v for k, v in env_for(workdir, Path(".")).items()})
    store = Store(settings)
    try:
        col = store.collection(repository)
        have = col.get(include=["documents", "metadatas", "embeddings"])
        base = len(have["ids"])
        rng = np.random.default_rng(0)
        step = int(store.chroma.client.get_max_batch_size())
        index = store.bm25(repository)
        made = base
        copy = 0
        while made < total:
            copy += 1
            n = min(base, total - made)
            vecs = np.asarray(have["embeddings"][:n], dtype=np.float32)
            vecs = vecs + rng.normal(0.0, 0.35 / np.sqrt(vecs.shape[1]), vecs.shape)
            vecs = (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)
            ids, texts, metas = [], [], []
            for i in range(n):
                words = have["documents"][i].split(" ")
                keep = rng.random(len(words)) >= 0.1
                text = " ".join(w for w, k in zip(words, keep) if k) or have["documents"][i]
                meta = dict(have["metadatas"][i])
                meta["file_path"] = f"copy-{copy}/{meta['file_path']}"
                meta["content_hash"] = content_hash(text)
                ids.append(hashlib.sha256(f"{copy}/{have['ids'][i]}".encode()).hexdigest())
                texts.append(text)
                metas.append(meta)
            for start in range(0, n, step):
                sl = slice(start, start + step)
                col.add(ids=ids[sl], embeddings=vecs[sl], documents=texts[sl], metadatas=metas[sl])
            with index.transaction():
                index.upsert(ids, texts, metas)
            made += n
        return int(col.count())
    finally:
        store.close_sync()


def pad_in_a_child(workdir: Path, repository: str, total: int) -> int:
    """`pad_index` in a process of its own. A child's ru_maxrss starts from its parent's
    high-water mark (the child is forked from the parent before it execs), so if this
    process held the 100k records it writes, every search started after it would report at
    least that much (a `/bin/true` spawned by a process that once held 400 MB "peaks" at 411
    MB)."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return int(pool.apply(pad_index, (workdir, repository, total)))


def search_peak(
    workdir: Path, parent: Path, more_env: dict[str, str] | None = None
) -> dict[str, Any]:
    env = {**env_for(workdir, parent), **(more_env or {})}
    runs = [run_child(["search", "--json", "-k", "10", q], env) for q in QUERIES]
    return {
        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
        "peak_rss_mb_each": [r["peak_rss_mb"] for r in runs],
        "wall_s_median": sorted(r["wall_s"] for r in runs)[len(runs) // 2],
    }


def server_search_peak(workdir: Path, parent: Path) -> dict[str, Any]:
    """`search_peak` with the vectors served by `chroma run` over the same Chroma directory:
    what a searching process holds when the HNSW index lives in the server."""
    from tests.support.chroma_fixtures import running_chroma_server

    with running_chroma_server(workdir / "chroma") as server:
        found = search_peak(
            workdir,
            parent,
            {"HETRIEVER_CHROMA_HOST": server.host, "HETRIEVER_CHROMA_PORT": str(server.port)},
        )
        status = Path(f"/proc/{server.process.pid}/status").read_text()
        hwm = next(
            int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")
        )
    return {**found, "server_peak_rss_mb": round(hwm / 1024, 1)}


def repos_folder(root: Path, sources: dict[str, Path]) -> Path:
    """A docs root that is a folder of git repositories, one per `sources` entry."""
    import shutil

    from tests.support.helpers import commit_all, init_repo

    for name, source in sources.items():
        repo = init_repo(root / name)
        shutil.copytree(source, repo, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git"))
        for path in repo.rglob("*"):  # the shared corpora are read-only
            path.chmod(path.stat().st_mode | 0o200)
        commit_all(repo, name)
    return root


def many(kind: str, scratch: Path, say) -> dict[str, Any]:
    """Peak RSS of one ingest over several repositories against one over a single one."""
    from bench.common import CORPORA, SAMPLE_DOCS

    if kind == "sample":
        runs = {
            "sample x1": {"sample-00": SAMPLE_DOCS},
            "sample x10": {f"sample-{i:02d}": SAMPLE_DOCS for i in range(10)},
        }
    else:
        both = {
            "hugo-docs": CORPORA / "hugo-docs" / "v2",
            "opentelemetry-io": CORPORA / "opentelemetry-io" / "v2-site",
        }
        runs = {
            "hugo-docs + opentelemetry-io": both,
            **{f"{name} alone": {name: path} for name, path in both.items()},
        }
    out: dict[str, Any] = {}
    ingest = ["ingest", "--json"]
    for label, sources in runs.items():
        work = scratch / label.replace(" ", "_")
        root = repos_folder(work / "docs", sources)
        env = {**env_for(work, root), "HETRIEVER_LOG_LEVEL": "INFO", "HETRIEVER_LOG_FORMAT": "json"}
        result = run_child(ingest, env)
        outcomes = result["output"] if isinstance(result["output"], list) else []
        out[label] = {
            "wall_s": result["wall_s"],
            "peak_rss_mb": result["peak_rss_mb"],
            "chunks": sum(o.get("chunks_written") or 0 for o in outcomes),
            "after_each": result["after_each"],
        }
        say(
            f"{label}: peak RSS {result['peak_rss_mb']:.0f} MB, {out[label]['chunks']} chunks, "
            f"{result['wall_s']:.0f} s; after each: "
            + ", ".join(
                f"{r['repository']} {r['rss_mb']:.0f}/{r['peak_rss_mb']:.0f}"
                for r in result["after_each"]
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--corpus",
        action="append",
        choices=NAMES,
        help="only this corpus (repeatable; default both)",
    )
    parser.add_argument(
        "--search-chunks",
        type=int,
        default=100_000,
        help="pad the hugo-docs index to this many chunks for the search figure (0: skip)",
    )
    parser.add_argument("--no-incremental", action="store_true")
    parser.add_argument(
        "--engine",
        choices=("local", "prefect"),
        default="local",
        help="ingest in the CLI process (default) or through the Prefect ingest "
        "flow (a temporary Prefect server unless PREFECT_API_URL is set)",
    )
    parser.add_argument(
        "--many", choices=("sample", "corpora"), help="only the many-repositories runs (see above)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.many:
        say_many = (lambda *_: None) if args.json else print
        run_child(["prepare-model"], {})
        with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
            found = {"many": args.many, **many(args.many, Path(tmp), say_many)}
        out_dir = REPO_ROOT / "bench" / "results"
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / f"bench_memory-many-{args.many}-latest.json").write_text(
            json.dumps(found, indent=2)
        )
        if args.json:
            print(json.dumps(found, indent=2))
        return 0

    from tests.support.helpers import build_corpus_parent, update_submodule

    corpora = args.corpus or list(NAMES)
    precision = os.environ.get("HETRIEVER_EMBEDDING_PRECISION", "fp32")
    report: dict[str, Any] = {
        "precision": precision,
        "engine": args.engine,
        "full": {},
        "search": {},
    }
    ingest = ["ingest", "--engine", args.engine, "--json"]
    say = (lambda *_: None) if args.json else print
    # Build the model (and the int8 variant) before anything is timed.
    run_child(["prepare-model"], {})
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        scratch = Path(tmp)
        sites = {}
        for name in corpora:
            parent, v1, v2 = build_corpus_parent(scratch / name, name)
            sites[name] = (parent, v1, v2)
            update_submodule(parent, name, v2)
            work = scratch / f"{name}-full"
            result = run_child(ingest, env_for(work, parent))
            report["full"][name] = {
                "wall_s": result["wall_s"],
                "peak_rss_mb": result["peak_rss_mb"],
                **ingest_counts(result),
            }
            say(
                f"full {name}: {result['wall_s']:.1f} s, peak RSS {result['peak_rss_mb']:.0f} MB, "
                f"{report['full'][name]['chunks_written']} chunks"
            )

        if "hugo-docs" in sites and not args.no_incremental:
            parent, v1, v2 = sites["hugo-docs"]
            work = scratch / "hugo-docs-inc"
            update_submodule(parent, "hugo-docs", v1)
            setup = run_child(ingest, env_for(work, parent))
            update_submodule(parent, "hugo-docs", v2)
            inc = run_child(ingest, env_for(work, parent))
            counts = ingest_counts(inc)
            full = report["full"]["hugo-docs"]
            share = counts["chunks_written"] / full["chunks_written"]
            budget = share * full["wall_s"] + 5.0
            report["incremental"] = {
                "wall_s": inc["wall_s"],
                "peak_rss_mb": inc["peak_rss_mb"],
                "v1_full_wall_s": setup["wall_s"],
                "v1_peak_rss_mb": setup["peak_rss_mb"],
                **counts,
                "embedded_share": round(share, 3),
                "budget_s": round(budget, 1),
            }
            say(
                f"incremental hugo-docs v1 -> v2: {inc['wall_s']:.1f} s for "
                f"{counts['chunks_written']} embedded chunks ({share:.0%} of the full run); "
                f"budget {budget:.1f} s; peak RSS {inc['peak_rss_mb']:.0f} MB"
            )

        if "hugo-docs" in sites:
            full = report["full"]["hugo-docs"]
            parent = sites["hugo-docs"][0]
            work = scratch / "hugo-docs-full"
            report["search"]["hugo-docs"] = {
                "chunks": full["chunks_written"],
                **search_peak(work, parent),
            }
            say(
                f"search {full['chunks_written']} chunks: peak RSS "
                f"{report['search']['hugo-docs']['peak_rss_mb']:.0f} MB"
            )
            if args.search_chunks:
                began = time.perf_counter()
                count = pad_in_a_child(work, "hugo-docs", args.search_chunks)
                padded = {
                    "chunks": count,
                    "pad_s": round(time.perf_counter() - began, 1),
                    **search_peak(work, parent),
                }
                report["search"][f"hugo-docs x{count}"] = padded
                say(
                    f"search {count} chunks: peak RSS {padded['peak_rss_mb']:.0f} MB, "
                    f"median {padded['wall_s_median']:.1f} s per CLI search"
                )
                served = server_search_peak(work, parent)
                report["search"][f"hugo-docs x{count} chroma run"] = {"chunks": count, **served}
                say(
                    f"search {count} chunks against `chroma run`: peak RSS "
                    f"{served['peak_rss_mb']:.0f} MB (the server's own peak "
                    f"{served['server_peak_rss_mb']:.0f} MB), median "
                    f"{served['wall_s_median']:.1f} s per CLI search"
                )

    # Every child's figure is at least this (see pad_in_a_child): it must stay below them.
    report["bench_process_peak_rss_mb"] = round(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
    )
    say(
        f"this process's own peak (a floor under every child's figure): "
        f"{report['bench_process_peak_rss_mb']:.0f} MB"
    )
    out = REPO_ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"bench_memory-{precision}-latest.json").write_text(json.dumps(report, indent=2))
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
