"""The `versions` setting and the versions found beside their repositories, on a real git
repository with two tags and a branch checked out beyond them."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetriever.core.config import load_settings
from hetriever.core.errors import ConfigurationError, SourceError
from hetriever.core.versions import VersionOf
from hetriever.discover.changes import compute_change_set, head_commit
from hetriever.discover.repositories import configured_repositories
from hetriever.discover.upstream import upstream
from hetriever.discover.versions import resolve_version
from tests.support.helpers import git, init_repo
from tests.support.versions_support import NAME, V1, V2, versioned_docs


def settings_for(docs_root: Path, tmp_path: Path, versions: dict) -> object:
    return load_settings(
        env={},
        config_file=None,
        docs_root=docs_root,
        chroma_path=tmp_path / "chroma",
        state_dir=tmp_path / "state",
        versions=versions,
    )


def test_the_last_tags_and_named_refs_become_repositories_named_after_them(tmp_path: Path):
    docs, commits = versioned_docs(tmp_path)
    settings = settings_for(docs, tmp_path, {NAME: {"tags": "v*", "last": 2}})
    repos = configured_repositories(settings)
    assert [r.name for r in repos] == [NAME, V1, V2]
    base, v1, v2 = repos
    assert base.version is None and base.commit == ""
    assert v1.version == VersionOf(NAME, "v1.0.0", "v1.0.0") and v1.path == base.path
    # the newest first: `last: 1` keeps v2.0.0 (version-aware, so v10 would beat v9)
    one = settings_for(docs, tmp_path, {NAME: {"tags": "v*", "last": 1}})
    assert [r.name for r in configured_repositories(one)] == [NAME, V2]
    # resolved to the tag's commit, never HEAD; the change set is read at that commit
    assert resolve_version(v2).commit == commits["v2.0.0"] == head_commit(v2)
    assert head_commit(base) == commits["main"]
    change = compute_change_set(resolve_version(v1), None)
    assert change.new_commit == commits["v1.0.0"]
    assert "content/legacy.md" in change.paths_to_index() and not change.dirty
    assert upstream(v1, commits["v1.0.0"]).ref == ""  # a version follows no remote branch


def test_selecting_a_repository_brings_its_versions_and_a_version_name_picks_one(
    tmp_path: Path,
):
    docs, _ = versioned_docs(tmp_path)
    settings = settings_for(docs, tmp_path, {NAME: {"refs": ["v1.0.0", "v2.0.0"]}})
    assert [r.name for r in configured_repositories(settings, [NAME])] == [NAME, V1, V2]
    assert [r.name for r in configured_repositories(settings, [V2])] == [V2]


def test_a_ref_that_names_no_commit_fails_and_a_remote_branch_resolves(tmp_path: Path):
    docs, commits = versioned_docs(tmp_path)
    clone = tmp_path / "clones" / NAME
    git(tmp_path, "clone", "-q", str(docs / NAME), str(clone))
    git(docs / NAME, "branch", "release-1", commits["v1.0.0"])
    git(clone, "fetch", "-q", "origin")  # release-1 exists only as origin/release-1
    settings = settings_for(clone.parent, tmp_path, {NAME: {"refs": ["release-1", "nowhere"]}})
    by_name = {r.name: r for r in configured_repositories(settings)}
    assert resolve_version(by_name[f"{NAME}--release-1"]).commit == commits["v1.0.0"]
    with pytest.raises(SourceError, match="'nowhere'.*names no commit"):
        resolve_version(by_name[f"{NAME}--nowhere"])


def test_a_version_named_like_a_discovered_repository_fails_alone(tmp_path: Path):
    docs, _ = versioned_docs(tmp_path)
    init_repo(docs / V1)  # a repository whose directory is the version's name
    git(docs / V1, "commit", "-q", "--allow-empty", "-m", "x")
    settings = settings_for(docs, tmp_path, {NAME: {"refs": ["v1.0.0", "v2.0.0"]}})
    repos = configured_repositories(settings)
    mine, version = [r for r in repos if r.name == V1]  # the discovered one, then the version
    assert mine.version is None and not mine.problem and mine.path == docs / V1
    assert version.version is not None and "already has" in version.problem
    assert not [r for r in repos if r.name == V2][0].problem


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ('{"hugo-docs": {"tags": "v*"}}', "needs last"),
        ('{"hugo-docs": {"last": 2}}', "last needs tags"),
        ('{"hugo-docs": {}}', "names no version"),
        ('{"hugo-docs": {"refs": ["--upload-pack=x"]}}', "not a branch or tag name"),
        ('{"hugo-docs": {"refs": ["a", "a"]}}', "listed twice"),
        ('{"hugo-docs": {"tag": "v*"}}', "Extra inputs"),
        ("not json", "cannot parse"),
    ],
)
def test_a_mistaken_versions_setting_is_one_clear_line(raw: str, said: str):
    with pytest.raises(ConfigurationError, match=said) as caught:
        load_settings(env={"HETRIEVER_VERSIONS": raw}, config_file=None)
    assert "HETRIEVER_VERSIONS" in str(caught.value.hint)
    assert "\n" not in str(caught.value)


def test_the_settings_file_takes_versions_as_a_table(tmp_path: Path):
    config = tmp_path / "hetriever.toml"
    config.write_text('[versions."Hugo.Docs"]\nrefs = ["release-1.30"]\ntags = "v*"\nlast = 3\n')
    settings = load_settings(env={}, config_file=config)
    spec = settings.versions["hugo-docs"]  # keyed like every per-repository setting
    assert (spec.refs, spec.tags, spec.last) == (["release-1.30"], "v*", 3)
