"""`hetriever search --version` and `hetriever diff`, as real `hetriever` processes over an
index holding a repository's tree and its version `v1.0.0` (`tests.support.versions`)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest

from hetriever.core.versions import version_name
from tests.support.versions import BASE, LABEL, versioned_workspace

pytestmark = pytest.mark.slow  # real `hetriever` processes, the model loaded in each

VERSION = version_name(BASE, LABEL)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, minilm_embedder):
    return versioned_workspace(tmp_path_factory.mktemp("cli-versions"), minilm_embedder)


def search(workspace, *args: str) -> dict:
    out = workspace.cli("search", "install the package", "-k", "3", "--json", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_search_by_version(workspace):
    tree = search(workspace)["matches"]
    assert tree[0]["metadata"]["repository"] == BASE and tree[0]["version"] == ""
    assert "wombat" in tree[0]["content"]
    old = search(workspace, "--version", LABEL, "-r", BASE)["matches"]
    assert {m["metadata"]["repository"] for m in old} == {VERSION}
    assert old[0]["version"] == LABEL and "quokka" in old[0]["content"]
    assert old[0]["link"] == "/docs/install/"

    printed = workspace.cli("search", "install the package", "-k", "3", "--version", "all")
    assert printed.returncode == 0, printed.stderr
    assert "in versions: current" in printed.stdout and f"{LABEL} (differs)" in printed.stdout

    unknown = workspace.cli("search", "install", "--version", "v9.9.9")
    assert unknown.returncode == 2
    assert "v9.9.9" in unknown.stderr and LABEL in unknown.stderr


def test_diff(workspace):
    out = workspace.cli("diff", BASE, LABEL, "current", "--json")
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert answer["counts"] == {"A": 1, "M": 1, "D": 1, "R": 1}
    assert {c["path"] for c in answer["changes"]} == {
        "content/docs/added.md",
        "content/docs/install.md",
        "content/docs/gopher.md",
        "content/docs/new-name.md",
    }
    text = workspace.cli("diff", BASE, LABEL, "current")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith(f"{BASE}: {LABEL} (") and "4 pages" in lines[0]
    assert (
        "R content/docs/new-name.md (from content/docs/old-name.md)  /docs/new-name/  "
        "Configuration" in lines
    )
    assert not any("draft" in line for line in lines)
    wrong = workspace.cli("diff", BASE, "v0.0.1", "current")
    assert wrong.returncode == 2 and LABEL in wrong.stderr


def _route(workspace, extra) -> dict:
    out = workspace.cli("status", "--json", **extra)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)[0]["search_route"]


def _warm_searches(workspace) -> int:
    out = json.loads(workspace.cli("metrics", "--json", "--source", "cli").stdout)
    return sum(row["count"] for row in out.get("by_source", []) if row["temperature"] == "warm")


def test_the_resident_search_process_answers_a_version_as_in_process(workspace):
    run_dir = Path(tempfile.mkdtemp(prefix="hv-"))  # a socket's path must stay short
    extra = {"HETRIEVER_SEARCH_RESIDENT_IDLE": "120", "XDG_RUNTIME_DIR": str(run_dir)}
    args = ("search", "install the package", "-k", "3", "--json", "--version", LABEL)
    want = json.loads(workspace.cli(*args).stdout)
    pid = None
    try:
        assert workspace.cli(*args, **extra).returncode == 0  # in-process; starts the resident
        deadline = time.monotonic() + 180
        while (found := _route(workspace, extra))["route"] != "resident":
            assert time.monotonic() < deadline, "the resident search process did not start"
            time.sleep(1)
        pid = found["pid"]
        warm = _warm_searches(workspace)
        got = json.loads(workspace.cli(*args, **extra).stdout)
        assert _warm_searches(workspace) == warm + 1  # the resident answered it
        assert [m["doc_id"] for m in got["matches"]] == [m["doc_id"] for m in want["matches"]]
        assert {m["version"] for m in got["matches"]} == {LABEL}
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
        shutil.rmtree(run_dir, ignore_errors=True)
