"""One ingest, two engines: the same failing repositories get the same outcomes in this
process and through the Prefect flow.

Four repositories under one docs root, run in name order by a fetching ingest: the first's
branch was force-pushed back (refused, the index stays), the second's remote is gone (it
fails alone), the third meets a full disk (a real tmpfs, filled), and the fourth is not
attempted because of it; nothing is recorded as complete that was not.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hetriever.core.config import load_settings
from hetriever.store.knowledge_store import clear_store_cache, get_knowledge_store
from tests.support.helpers import (
    add_submodule,
    break_remote,
    commit_all,
    git,
    init_repo,
    move_branch_back,
    write_files,
)
from tests.support.small_disk import fill, small_tmpfs

pytestmark = [pytest.mark.prefect, pytest.mark.slow]

MOVED, NO_REMOTE, FULL, AFTER = "aa-moved-docs", "bb-remote-docs", "cc-full-docs", "dd-after-docs"


def pages(word: str, version: int, n: int = 3) -> dict[str, str]:
    return {
        f"content/docs/{word}-{i}.md": f"---\ntitle: {word} {i}\n---\n\nPage {i} about "
        f"{word}, version {version}. " + "More words about it. " * 20 + "\n"
        for i in range(n)
    }


def failing_docs_root(root: Path, model_dir: Path):
    """The docs root, indexed once: (settings, the sources by name, the commit each holds)."""
    parent = init_repo(root / "parent")
    commit_all(parent, "init parent")
    sources = {}
    for name in (MOVED, NO_REMOTE, FULL, AFTER):
        source = init_repo(root / f"{name}-source")
        write_files(source, pages(name.split("-")[0], 1))
        commit_all(source, f"{name} v1")
        add_submodule(parent, source, f"docs/{name}")
        sources[name] = source
    settings = load_settings(
        env={},
        config_file=None,
        docs_root=parent,
        chroma_path=root / "disk" / "chroma",
        state_dir=root / "disk" / "state",
        model_dir=model_dir,
    )
    return parent, settings, sources


async def in_process(settings) -> list[dict]:
    from hetriever.discover.repositories import configured_repositories
    from hetriever.index.ingest import ingest_repositories

    repos = configured_repositories(settings)
    outcomes = await ingest_repositories(repos, get_knowledge_store(settings), settings, fetch=True)
    return [o.to_dict() for o in outcomes]


async def through_the_flow(settings) -> list[dict]:
    from flows.ingest import ingest

    state = await ingest(fetch=True, settings=settings, return_state=True)
    return (await state.aresult(raise_on_failure=False))["repositories"]


ENGINES = {"in-process": in_process, "prefect": through_the_flow}


def run_failing(engine: str, root: Path, model_dir: Path) -> list[dict]:
    """The failing run of `engine` over its own docs root and disk; its outcomes, with the
    root's path written `<root>` and what each says after its first sentence left out (the
    low-level error a full disk raised is the one the engine's write met)."""
    run = ENGINES[engine]
    with small_tmpfs(root / "disk", "64m"):
        parent, settings, sources = failing_docs_root(root, model_dir)
        clear_store_cache()
        try:
            first = asyncio.run(run(settings))
            assert all(o["ok"] and o["mode"] == "full" for o in first), first
            moved = sources[MOVED]
            old = git(moved, "rev-parse", "HEAD")
            write_files(moved, pages("aa", 2))
            newer = commit_all(moved, "a commit a force push takes back")
            for name in (FULL, AFTER):
                write_files(sources[name], pages(name.split("-")[0], 2, n=30))
                commit_all(sources[name], f"{name} v2")
            second = asyncio.run(run(settings))
            assert all(o["ok"] for o in second), second
            indexed = {o["repository"]: o["new_commit"] for o in second}
            assert indexed[MOVED] == newer

            move_branch_back(moved, old)
            break_remote(parent / "docs" / NO_REMOTE, root / "nowhere")
            for name in (FULL, AFTER):
                write_files(sources[name], pages(name.split("-")[0], 3, n=30))
                commit_all(sources[name], f"{name} v3")
            fill(root / "disk" / "filler")
            outcomes = asyncio.run(run(settings))

            # nothing recorded that was not done: each index holds the commit it held
            store = get_knowledge_store(settings)
            for name in (MOVED, FULL, AFTER):
                meta = asyncio.run(store.get_collection_metadata(name))
                assert meta["commit_hash"] == indexed[name], name
            (root / "disk" / "filler").unlink(missing_ok=True)
        finally:
            clear_store_cache()
    said = str(root)
    return [
        {
            key: (value.replace(said, "<root>").split(" (")[0] if isinstance(value, str) else value)
            for key, value in o.items()
            if key not in ("run_id", "new_commit", "refused_commit", "hint")
        }
        | {
            "commits": (
                o.get("new_commit") == indexed[o["repository"]],
                o.get("refused_commit") == old if o.get("mode") == "refused" else None,
            )
        }
        for o in outcomes
    ]


def test_the_same_failing_repositories_get_the_same_outcomes_in_both_engines(
    tmp_path, minilm_model_dir, prefect_harness
):
    local = run_failing("in-process", tmp_path / "in-process", minilm_model_dir)
    flow = run_failing("prefect", tmp_path / "prefect", minilm_model_dir)

    assert [o["repository"] for o in local] == [MOVED, NO_REMOTE, FULL, AFTER]
    moved, no_remote, full, after = local
    assert moved["ok"] and moved["mode"] == "refused" and moved["commits"] == (True, True)
    assert not no_remote["ok"] and "git fetch --quiet --prune origin failed" in no_remote["error"]
    assert not full["ok"] and full["error"].startswith("no space left on the device"), full
    assert not after["ok"] and after["error"] == "not attempted: " + full["error"], after
    assert flow == local
