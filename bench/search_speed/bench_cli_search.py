"""`hetriever search` at the prompt, as whole processes: in-process against the resident
search process, and against the code of another revision.

    python -m bench.search_speed.bench_cli_search                       # hugo-docs v2, 5 rounds
    python -m bench.search_speed.bench_cli_search --baseline 66a1aa0 --rounds 5 --json

The index is a full ingest of hugo-docs v2 (a git repository made of the corpus' files),
built once into bench/results/cli-index/ and reused. Each round runs every query once per
way, the ways alternating within the round so that the machine's load falls on each alike:

- `in-process`: `hetriever search` with `HETRIEVER_SEARCH_RESIDENT_IDLE=0`: imports, the
  store, the model and the BM25 index loaded by the search's own process;
- `baseline`: the same with the `hetriever` package of `--baseline REV` (extracted from git
  into a temporary directory and imported in place of the checkout's);
- `resident`: `hetriever search` answered by the resident search process (started before the
  rounds, and checked to have answered: its pid is the one `status --json` names throughout).

Per way: median wall seconds and CPU seconds (user + sys of the search's process, from
getrusage of the waited child); for `resident` also the resident process's own CPU per search
(/proc/<pid>/stat), which the prompt does not wait on but the machine pays. Every query's
results (ids, order, scores, links) are compared between the ways; the load average is
printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import CORPORA, REPO_ROOT, RESULTS_DIR, print_table  # noqa: E402

QUERIES = [
    "range over pages sorted by date",
    "where",
    "how do I add a menu entry",
    "image processing resize",
    "RelPermalink",
]
HETRIEVER = [sys.executable, "-m", "hetriever.cli", "-q"]
# Runs the CLI with the hetriever package found first on PYTHONPATH (the editable install's
# finder would otherwise bring back the checkout's).
BASELINE_RUNNER = (
    "import sys; sys.meta_path[:] = [f for f in sys.meta_path "
    "if 'editable' not in getattr(f, '__module__', '') and "
    "'editable' not in getattr(type(f), '__module__', '')]; "
    "from hetriever.cli import main; sys.exit(main(sys.argv[1:]))"
)


def git(*args: str, cwd: Path) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "bench",
        "GIT_AUTHOR_EMAIL": "b@example.invalid",
        "GIT_COMMITTER_NAME": "bench",
        "GIT_COMMITTER_EMAIL": "b@example.invalid",
    }
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def build_index(where: Path) -> dict[str, str]:
    """The environment of a hugo-docs v2 index under `where` (ingested once, then reused)."""
    docs, chroma = where / "docs", where / "chroma"
    # A model prepared by this install: one another install prepared is checked by hashing
    # its source weights (0.2 s a search before this revision), which no user pays.
    env = {
        **os.environ,
        "HETRIEVER_DOCS_ROOT": str(docs),
        "HETRIEVER_CHROMA_PATH": str(chroma),
        "HETRIEVER_MODEL_DIR": str(where / "model"),
        "HETRIEVER_LOG_LEVEL": "WARNING",
        "XDG_RUNTIME_DIR": tempfile.mkdtemp(prefix="hbench-"),
    }
    if (where / "ready").exists():
        return env
    shutil.rmtree(where, ignore_errors=True)
    subprocess.run(
        HETRIEVER + ["prepare-model", "--model-dir", str(where / "model")],
        env=env,
        check=True,
        capture_output=True,
    )
    repo = docs / "hugo-docs"
    shutil.copytree(CORPORA / "hugo-docs" / "v2", repo, copy_function=shutil.copy)
    git("init", "-q", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "v2", cwd=repo)
    started = time.perf_counter()
    subprocess.run(
        HETRIEVER + ["ingest"],
        env={**env, "HETRIEVER_SEARCH_RESIDENT_IDLE": "0"},
        check=True,
        capture_output=True,
    )
    print(f"indexed hugo-docs v2 in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    (where / "ready").write_text("")
    return env


def timed(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {out.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out.stdout


def process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def resident_pid(env: dict[str, str], cwd: Path) -> int | None:
    out = subprocess.run(
        HETRIEVER + ["status", "--json"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    route = json.loads(out.stdout)[0]["search_route"]
    return route.get("pid") if route["route"] == "resident" else None


def comparable(stdout: str) -> Any:
    answer = json.loads(stdout)
    answer.pop("search_time_ms", None)
    return answer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", help="a git revision whose CLI is measured beside")
    parser.add_argument(
        "--baseline-path",
        default="",
        help="a folder of packages the baseline needs and this install no longer has "
        "(e.g. `pip install --target DIR gitpython` for revisions before f664577)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not (CORPORA / "hugo-docs" / "v2").is_dir():
        print(f"skipped: no hugo-docs corpus under {CORPORA}", file=sys.stderr)
        return 0
    env = build_index(RESULTS_DIR / "cli-index")
    cwd = Path(env["HETRIEVER_DOCS_ROOT"])
    ways: dict[str, tuple[list[str], dict[str, str]]] = {
        "in-process": (HETRIEVER, {**env, "HETRIEVER_SEARCH_RESIDENT_IDLE": "0"}),
        "resident": (HETRIEVER, {**env, "HETRIEVER_SEARCH_RESIDENT_IDLE": "900"}),
    }
    baseline_dir = None
    if args.baseline:
        baseline_dir = Path(tempfile.mkdtemp(prefix="hbench-baseline-"))
        archive = subprocess.run(
            ["git", "archive", args.baseline, "hetriever"],
            cwd=REPO_ROOT,
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(baseline_dir)], input=archive, check=True)
        # In its own process too: a revision with a resident search process would start one.
        ways["baseline"] = (
            [sys.executable, "-c", BASELINE_RUNNER, "-q"],
            {
                **env,
                "HETRIEVER_SEARCH_RESIDENT_IDLE": "0",
                "PYTHONPATH": os.pathsep.join(
                    p for p in (str(baseline_dir), args.baseline_path) if p
                ),
            },
        )

    # Bytecode written first, as an installed package has it: where PYTHONDONTWRITEBYTECODE is
    # set, every search compiled the modules it imports (an extracted baseline has none).
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(REPO_ROOT / "hetriever")]
        + ([str(baseline_dir / "hetriever")] if baseline_dir else []),
        check=True,
        capture_output=True,
    )
    resident_env = ways["resident"][1]
    pid = resident_pid(resident_env, cwd)
    if pid is None:  # one search in-process starts it; wait until it answers
        timed(HETRIEVER + ["search", "warm"], resident_env, cwd)
        deadline = time.monotonic() + 300
        while pid is None and time.monotonic() < deadline:
            time.sleep(1)
            pid = resident_pid(resident_env, cwd)
    if pid is None:
        raise SystemExit("the resident search process did not start")

    walls: dict[str, list[float]] = {w: [] for w in ways}
    cpus: dict[str, list[float]] = {w: [] for w in ways}
    resident_cpu: list[float] = []
    answers: dict[str, dict[str, Any]] = {w: {} for w in ways}
    loads = []
    for round_no in range(args.rounds):
        order = list(ways) if round_no % 2 == 0 else list(reversed(ways))
        for query in QUERIES:
            for way in order:
                command, way_env = ways[way]
                before = process_cpu(pid) if way == "resident" else 0.0
                wall, cpu, stdout = timed(command + ["search", "--json", query], way_env, cwd)
                if way == "resident":
                    resident_cpu.append(process_cpu(pid) - before)
                walls[way].append(wall)
                cpus[way].append(cpu)
                answers[way].setdefault(query, comparable(stdout))
        loads.append(os.getloadavg()[0])
    still = resident_pid(resident_env, cwd)
    same = {way: all(answers[way][q] == answers["in-process"][q] for q in QUERIES) for way in ways}
    rows = [
        [
            way,
            f"{statistics.median(walls[way]):.3f}",
            f"{statistics.median(cpus[way]):.3f}",
            f"{statistics.median(resident_cpu):.3f}" if way == "resident" else "",
            "yes" if same[way] else "NO",
        ]
        for way in ways
    ]
    summary = {
        "rounds": args.rounds,
        "queries": len(QUERIES),
        "load_avg_1min": [round(x, 2) for x in loads],
        "resident_pid_unchanged": still == pid,
        "ways": {
            way: {
                "wall_s_median": statistics.median(walls[way]),
                "cpu_s_median": statistics.median(cpus[way]),
                "same_results_as_in_process": same[way],
            }
            for way in ways
        },
    }
    summary["ways"]["resident"]["resident_cpu_s_median"] = statistics.median(resident_cpu)
    if baseline_dir is not None:
        shutil.rmtree(baseline_dir, ignore_errors=True)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print_table(
            ["way", "wall s (median)", "CPU s (median)", "resident's CPU s", "same results"], rows
        )
        print(
            f"load average (1 min) after each round: {summary['load_avg_1min']}; "
            f"resident pid unchanged: {still == pid}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
