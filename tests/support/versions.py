"""Versions of a repository as the ingest makes them: the tree indexed under its own name,
and an older commit of the same git repository indexed under `version_name(base, label)`,
its catalog record saying which version it is."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hetriever.core.versions import VersionOf, version_name
from hetriever.discover.repositories import Repository
from hetriever.index.indexing import index_repository
from tests.support.helpers import commit_all, git, init_repo, write_files
from tests.support.serve_fixtures import Served, Workspace, running


def index_tree(store: Any, path: Path, name: str) -> Repository:
    """The repository at `path`, as checked out, indexed as `name`."""
    repo = Repository(name=name, path=path)
    assert asyncio.run(index_repository(repo, store, store.settings)).completed
    return repo


def index_version(
    store: Any, source: Path, base: str, label: str, where: Path, ref: str = ""
) -> Repository:
    """`source` cloned into `where` at `ref` (the label, by default) and indexed as version
    `label` of `base`: its own repository, marked as a version in the catalog."""
    ref = ref or label
    name = version_name(base, label)
    clone = where / name
    where.mkdir(parents=True, exist_ok=True)
    git(where, "clone", "-q", "--no-checkout", str(source), str(clone))
    git(clone, "checkout", "-q", "--detach", ref)
    repo = index_tree(store, clone, name)
    record = store.catalog.repository(name)
    store.catalog.upsert_repository(
        name, settings={**record.settings, **VersionOf(base, label, ref).to_settings()}
    )
    return repo


def page(title: str, body: str, *extra: str) -> str:
    return "---\n" + "\n".join([f"title: {title}", *extra]) + "\n---\n\n" + body + "\n"


BASE, LABEL = "docs-site", "v1.0.0"
# The tagged docs, and what the next commit changes: the install page rewritten, the gopher
# page deleted, a page renamed, one added and a draft added.
OLD_PAGES = {
    "content/_index.md": page("Docs", "The documentation of the site."),
    "content/docs/install.md": page(
        "Install", "Install the quokka package with the quokka manager, then run quokka init."
    ),
    "content/docs/gopher.md": page(
        "Gopher exporter", "The gopher exporter sends telemetry over the gopher protocol."
    ),
    "content/docs/old-name.md": page(
        "Configuration",
        "Configure the site in its configuration file: the title, the base URL, the "
        "languages and the menus all live there, one table each.",
    ),
    "content/docs/themes.md": page("Themes", "Themes set the colours and the fonts of a site."),
}
NEW_PAGES = {
    "content/docs/install.md": page(
        "Install", "Install the wombat package with the wombat installer, then run wombat setup."
    ),
    "content/docs/new-name.md": OLD_PAGES["content/docs/old-name.md"],
    "content/docs/added.md": page("Added page", "A page that only the newer docs have."),
    "content/docs/draft.md": page("Draft page", "Not published yet.", "draft: true"),
}
GONE = ("content/docs/gopher.md", "content/docs/old-name.md")


def two_versions(source: Path) -> tuple[str, str]:
    """`source` made a git repository holding OLD_PAGES tagged LABEL, then NEW_PAGES on top
    (GONE removed); (the tag's commit, the head's)."""
    init_repo(source)
    write_files(source, OLD_PAGES)
    old = commit_all(source, "older docs")
    git(source, "tag", LABEL)
    git(source, "rm", "-q", *GONE)
    write_files(source, NEW_PAGES)
    return old, commit_all(source, "newer docs")


def versioned_workspace(root: Path, embedder: Any) -> Workspace:
    """A docs root holding BASE (two_versions), indexed as its tree and as its version
    LABEL, and the environment of `hetriever` processes over that index."""
    from hetriever.store.knowledge_store import Store
    from tests.support.chroma_fixtures import store_settings

    source = root / "docs" / BASE
    two_versions(source)
    store = Store(store_settings(root, docs_root=root / "docs"), embedder=embedder)
    try:
        index_tree(store, source, BASE)
        index_version(store, source, BASE, LABEL, root / "versions")
    finally:
        store.close_sync()
    env = {
        **os.environ,
        "HETRIEVER_DOCS_ROOT": str(root / "docs"),
        "HETRIEVER_CHROMA_PATH": str(root / "chroma"),
        "HETRIEVER_STATE_DIR": str(root / "state"),
        "HETRIEVER_MODEL_DIR": str(embedder.model_dir),
        "HETRIEVER_LOG_LEVEL": "WARNING",
    }
    for name in ("HETRIEVER_API_KEYS", "HETRIEVER_API_KEY", "HETRIEVER_API_KEYS_FILE"):
        env.pop(name, None)
    return Workspace(root, env, source)


@pytest.fixture(scope="session")
def versioned(tmp_path_factory: pytest.TempPathFactory, minilm_embedder: Any) -> Workspace:
    """`versioned_workspace`, built once for the tests that only read it."""
    return versioned_workspace(tmp_path_factory.mktemp("versioned"), minilm_embedder)


@pytest.fixture(scope="session")
def versioned_api(versioned: Workspace) -> Iterator[Served]:
    """A real `hetriever serve` over `versioned`."""
    with running(versioned, "serve") as served:
        yield served
