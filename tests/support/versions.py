"""Versions of a repository as the ingest makes them: the tree indexed under its own name,
and an older commit of the same git repository indexed under `version_name(base, label)`,
its catalog record saying which version it is."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from hetriever.core.versions import VersionOf, version_name
from hetriever.discover.repositories import Repository
from hetriever.index.indexing import index_repository
from tests.support.helpers import git


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
