"""What it costs a searcher to follow a Chroma server: cold copy, refresh after a change, check.

A `chroma run` server gets `--chunks` chunks (real hugo-docs v2 chunk texts and metadata, the
files repeated under new paths to reach the size; random unit vectors, which following never
reads) and the ingest side publishes the manifest. Then, each in a fresh `hetriever follow`
subprocess with a state directory of its own (time and peak RSS of that process):
- cold: an empty state directory copies the catalog and BM25 index;
- refresh by files: the ingest side rewrote whole files holding `--change` of the chunks (old
  chunks deleted, new ones added, as an edit does) and published naming them, as an
  incremental run does: the follower reads only those files;
- refresh by diff: the same again, published without the list (as after a full run, or for a
  follower that missed a publish): the follower diffs every chunk's id and metadata;
- check: nothing changed (the manifest read only).
The cold copy is also compared with building the same BM25 index from texts in-process.

    python -m bench.serve.bench_follow [--chunks 100000] [--change 0.01] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]

from bench.common import (  # noqa: E402
    RESULTS_DIR,
    chroma_server,
    load_corpus_chunks,
    load_sample_chunks,
)
from hetriever.core.config import Settings  # noqa: E402
from hetriever.core.logs import configure_logging  # noqa: E402

NAME = "bench-docs"


class _NoModel:
    """The ingest side here writes vectors itself: the store only needs the model's name."""

    name = "all-MiniLM-L6-v2"
    dimensions = 384
    max_tokens = 256


def records(n: int) -> tuple[list[str], list[str], list[dict]]:
    corpus = load_corpus_chunks("hugo-docs") or load_sample_chunks(40)
    base = corpus.chunks
    ids, texts, metas = [], [], []
    for i in range(n):
        chunk = base[i % len(base)]
        copy = i // len(base)
        meta = dict(chunk.metadata)
        meta["file_path"] = f"copy-{copy:03d}/{meta.get('file_path', '')}"
        ids.append(f"{copy:03d}-{chunk.id}")
        texts.append(chunk.text)
        metas.append(meta)
    return ids, texts, metas


def vectors(n: int, rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal((n, 384)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


_CHILD = (
    "import sys\n"
    "from hetriever.cli import main\n"
    "from hetriever.core.peak_memory import own_peak_rss_mb\n"
    "code = main(['-q', 'follow', '--json'])\n"
    "peak = int(own_peak_rss_mb() * 1024)\n"
    "print(f'PEAK_KB {peak}', file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def follow(env: dict[str, str], state: Path) -> dict:
    """`hetriever follow --json` in a process of its own: its report, wall time, peak RSS."""
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _CHILD],
        env={**env, "HETRIEVER_STATE_DIR": str(state)},
        capture_output=True,
        text=True,
        timeout=3600,
        cwd=REPO_ROOT,
    )
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    peak_kb = int(done.stderr.rsplit("PEAK_KB ", 1)[1].split()[0])
    report = json.loads(done.stdout)
    return {
        "wall_s": round(wall, 2),
        "follow_s": report["seconds"],
        "written": report["added"],
        "deleted": report["removed"],
        "peak_rss_mb": round(peak_kb / 1024),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--change", type=float, default=0.01)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    configure_logging("ERROR")
    from hetriever.store.bm25.bm25_index import BM25Index
    from hetriever.store.knowledge_store import Store

    rng = np.random.default_rng(0)
    ids, texts, metas = records(args.chunks)
    out: dict = {"chunks": args.chunks, "change": args.change}
    with (
        tempfile.TemporaryDirectory(prefix="bench-follow-") as tmp,
        chroma_server(Path(tmp) / "chroma") as port,
    ):
        settings = Settings(
            chroma_host="127.0.0.1", chroma_port=port, state_dir=Path(tmp) / "ingest-state"
        )
        store = Store(settings, embedder=_NoModel())
        col = store.collection(NAME, create=True)
        step = store.chroma.max_batch_size()
        began = time.perf_counter()
        for start in range(0, len(ids), step):
            end = start + step
            col.upsert(
                ids=ids[start:end],
                documents=texts[start:end],
                metadatas=metas[start:end],
                embeddings=vectors(len(ids[start:end]), rng),
            )
        out["server_load_s"] = round(time.perf_counter() - began, 1)
        store.replica.publish(NAME)

        env = {k: v for k, v in os.environ.items() if not k.startswith("HETRIEVER_")}
        env.update(HETRIEVER_CHROMA_HOST="127.0.0.1", HETRIEVER_CHROMA_PORT=str(port))
        state = Path(tmp) / "follower"
        out["cold"] = follow(env, state)
        out["check"] = follow(env, state)

        by_file: dict[str, list[int]] = {}
        for i, meta in enumerate(metas):
            by_file.setdefault(str(meta["file_path"]), []).append(i)
        files = list(by_file)
        picked = 0

        def edit(tag: str) -> list[str]:
            """Rewrite whole files (about `--change` of the chunks): new ids, same texts."""
            nonlocal picked
            chosen: list[str] = []
            rows: list[int] = []
            while len(rows) < args.chunks * args.change:
                chosen.append(files[picked])
                rows += by_file[files[picked]]
                picked += 1
            col.delete(ids=[ids[i] for i in rows])
            for i in rows:
                ids[i] = f"{tag}-{ids[i]}"
            col.upsert(
                ids=[ids[i] for i in rows],
                documents=[texts[i] for i in rows],
                metadatas=[metas[i] for i in rows],
                embeddings=vectors(len(rows), rng),
            )
            out[f"changed_chunks_{tag}"] = len(rows)
            return chosen

        store.replica.publish(NAME, edit("files"))
        out["refresh_files"] = follow(env, state)
        edit("diff")
        store.replica.publish(NAME)
        out["refresh_diff"] = follow(env, state)
        store.close_sync()

        began = time.perf_counter()
        index = BM25Index(Path(tmp) / "direct.sqlite")
        with index.transaction():
            for start in range(0, len(ids), 5000):
                index.upsert(
                    ids[start : start + 5000],
                    texts[start : start + 5000],
                    metas[start : start + 5000],
                )
        out["bm25_from_texts_s"] = round(time.perf_counter() - began, 1)
        index.close()
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "bench_follow-latest.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
