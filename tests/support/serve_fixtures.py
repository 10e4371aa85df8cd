"""An indexed documentation workspace and real `hetriever serve` / `hetriever mcp` processes.

Registered as a plugin by tests/conftest.py. `served_docs` builds (once per session) a folder
of three git repositories at three access levels, indexes it with the real CLI, and writes an
API key file with a TEAM and a PRIVATE key. `running(...)` starts a server subprocess on a free
port and waits for it to answer (bounded), then stops it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hetriever.serve.keys import hash_key
from tests.support.chroma_fixtures import free_port, wait_until_answering
from tests.support.helpers import REPO_ROOT, commit_all, init_repo, stop_process, write_files

HETRIEVER = Path(sys.executable).parent / "hetriever"
START_TIMEOUT = 180.0  # model load on a busy machine
TEAM_KEY = "htr_team_key_for_tests_0123456789"
PRIVATE_KEY = "htr_private_key_for_tests_0123456789"

TEAM_NOTES = {
    "content/oncall.md": "---\ntitle: On-call rotation\n---\n\nThe kestrel on-call rotation "
    "is shared by the team. Page the kestrel channel first.\n",
}
PRIVATE_OPS = {
    "content/payroll.md": "---\ntitle: Payroll schedule\n---\n\nThe kestrel payroll schedule "
    "is private. Salaries are paid on the last day.\n",
}
# The sample site made bilingual the way Hugo sites are: a configuration naming the languages,
# French pages in their own content directory.
FRENCH_PAGE = {
    "hugo.toml": 'defaultContentLanguage = "en"\n[languages.en]\ncontentDir = "content"\n'
    'weight = 1\n[languages.fr]\ncontentDir = "content/fr"\nweight = 2\n',
    "content/fr/docs/where.md": "---\ntitle: La fonction where\n---\n\nLa fonction where "
    "renvoie la collection filtrée selon la condition de comparaison.\n",
}


@dataclass
class Workspace:
    root: Path
    env: dict[str, str]
    sample: Path  # the sample-docs git repository (commit to it, then re-ingest)

    def cli(self, *args: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(HETRIEVER), *args],
            env={**self.env, **extra},
            capture_output=True,
            text=True,
            timeout=300,
        )


def build_workspace(
    root: Path,
    model_dir: Path,
    *,
    sample_files: dict[str, str],
    repositories: dict[str, dict[str, str]],
    access_levels: str,
    keys: str,
) -> Workspace:
    """A docs folder under `root`: the sample docs with `sample_files` written over them, one
    git repository per entry of `repositories`, an API key file holding `keys`; indexed by the
    real CLI. The environment names every path itself, so none of the caller's applies."""
    sample = init_repo(root / "docs" / "sample-docs")
    shutil.copytree(REPO_ROOT / "examples" / "sample-docs", sample, dirs_exist_ok=True)
    write_files(sample, sample_files)
    commit_all(sample, "sample docs")
    for name, files in repositories.items():
        repo = init_repo(root / "docs" / name)
        write_files(repo, files)
        commit_all(repo, name)
    keys_file = root / "api-keys"
    keys_file.write_text(keys, encoding="utf-8")
    env = {
        **os.environ,
        "HETRIEVER_DOCS_ROOT": str(root / "docs"),
        "HETRIEVER_CHROMA_PATH": str(root / "chroma"),
        "HETRIEVER_STATE_DIR": str(root / "state"),
        "HETRIEVER_MODEL_DIR": str(model_dir),
        "HETRIEVER_ACCESS_LEVELS": access_levels,
        "HETRIEVER_API_KEYS_FILE": str(keys_file),
        "HETRIEVER_LOG_LEVEL": "WARNING",
    }
    for name in (
        "HETRIEVER_API_KEYS",
        "HETRIEVER_API_KEY",
        "HETRIEVER_CORS_ORIGINS",
        "HETRIEVER_PAGE_API_KEY",
    ):
        env.pop(name, None)
    workspace = Workspace(root, env, sample)
    out = workspace.cli("ingest", "--json")
    assert out.returncode == 0, out.stderr
    return workspace


@pytest.fixture(scope="session")
def served_docs(tmp_path_factory: pytest.TempPathFactory, minilm_embedder: Any) -> Workspace:
    return build_workspace(
        tmp_path_factory.mktemp("served"),
        minilm_embedder.model_dir,
        sample_files=FRENCH_PAGE,
        repositories={"team-notes": TEAM_NOTES, "private-ops": PRIVATE_OPS},
        access_levels="team-notes=TEAM,private-ops=PRIVATE",
        keys=f"# hashed keys\nteam {hash_key(TEAM_KEY)} TEAM\n"
        f"ops {hash_key(PRIVATE_KEY)} PRIVATE\n",
    )


@dataclass
class Served:
    url: str
    process: subprocess.Popen
    log: Path


@contextlib.contextmanager
def running(
    workspace: Workspace,
    *argv: str,
    ready_path: str = "/readyz",
    port: int | None = None,
    **extra_env: str,
) -> Iterator[Served]:
    """`hetriever <argv> --port <free>` (or `port`) until the block ends; its output goes to
    a log file."""
    port = port or free_port()
    log = workspace.root / f"{argv[0]}-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(HETRIEVER), *argv, "--host", "127.0.0.1", "--port", str(port)],
            env={**workspace.env, **extra_env},
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    served = Served(f"http://127.0.0.1:{port}", proc, log)
    try:
        wait_until_answering(
            proc,
            served.url + ready_path,
            what=f"hetriever {argv[0]}",
            log=log,
            timeout=START_TIMEOUT,
            ready=lambda status: status < 500,
        )
        yield served
    finally:
        stop_process(proc)
