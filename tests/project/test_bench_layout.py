"""Every benchmark is where bench/run_all.py looks for it and starts: each script imports as
`bench.<folder>.<name>` and answers `--help` without running (one subprocess for all of them,
so a moved helper or a stale import fails here, not in the next long bench run)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.helpers import REPO_ROOT

BENCH = REPO_ROOT / "bench"
SCRIPTS = sorted(
    p for p in BENCH.glob("*/*.py") if p.stem.startswith("bench_") or p.stem == "make_pool"
)

# Run from the repository root, as `python -m bench.<folder>.<name>` is: each module imported
# and its main() given --help; argparse exits 0 with a usage text before any work starts.
PROBE = """
import contextlib, importlib, io, json, sys
answers = {}
for module in sys.argv[1:]:
    loaded = importlib.import_module(module)
    out = io.StringIO()
    sys.argv = [module, "--help"]
    try:
        with contextlib.redirect_stdout(out):
            loaded.main()
        answers[module] = ("ran without exiting", "")
    except SystemExit as done:
        answers[module] = (done.code, out.getvalue())
print(json.dumps(answers))
"""


def module_of(script) -> str:
    return f"bench.{script.parent.name}.{script.stem}"


def test_the_scripts_live_in_folders_that_are_packages():
    assert not list(BENCH.glob("bench_*.py")), "a bench script left at bench/'s top"
    assert len(SCRIPTS) >= 20
    for folder in {p.parent for p in SCRIPTS}:
        assert (folder / "__init__.py").is_file(), folder


@pytest.mark.slow  # one subprocess that imports every bench (~10 s)
def test_every_bench_imports_and_answers_help_without_running():
    modules = [module_of(p) for p in SCRIPTS]
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *modules],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout.splitlines()[-1])
    assert sorted(answers) == sorted(modules)
    for module, (code, usage) in answers.items():
        assert code == 0 and "usage:" in usage, (module, code, usage[-500:])


def test_run_all_finds_every_bench_it_names_and_refuses_an_unknown_one():
    from bench.run_all import ORDER, bench_modules

    modules = bench_modules()
    assert sorted(modules.values()) == sorted(
        module_of(p) for p in SCRIPTS if p.stem.startswith("bench_")
    )
    assert set(ORDER) <= set(modules), set(ORDER) - set(modules)
    done = subprocess.run(
        [sys.executable, "-m", "bench.run_all", "no_such_bench"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "no_such_bench: no such bench" in done.stdout, done.stdout
