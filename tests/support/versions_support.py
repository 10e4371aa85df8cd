"""A documentation repository with two release tags and a branch checked out beyond them, for
the tests of followed versions; an embedder that counts what it embeds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.helpers import commit_all, git, init_repo, write_files

NAME = "hugo-docs"
V1, V2 = f"{NAME}--v1-0-0", f"{NAME}--v2-0-0"
WORDS = "Templates render pages from content files with partials and shortcodes."


def page(title: str, body: str) -> str:
    return f"---\ntitle: {title}\n---\n\n{body} {WORDS * 6}\n"


# The pages at each tag and on main: `about` is the same throughout, `guide` changes at each
# commit, `legacy` is removed in v2.0.0, `new` arrives in v2.0.0.
AT_V1 = {
    "content/about.md": page("About", "The project and its people."),
    "content/guide.md": page("Guide", "Install version one with the old installer."),
    "content/legacy.md": page("Legacy", "The legacy API, removed later."),
}
AT_V2 = {
    "content/about.md": AT_V1["content/about.md"],
    "content/guide.md": page("Guide", "Install version two with the new installer."),
    "content/new.md": page("New", "What arrived in version two."),
}
AT_MAIN = {**AT_V2, "content/guide.md": page("Guide", "Install the development build.")}


def versioned_docs(root: Path) -> tuple[Path, dict[str, str]]:
    """A docs root (a directory of git repositories) holding `hugo-docs`: tags v1.0.0 and
    v2.0.0, then a commit on `main`, which is checked out. Returns (docs root, commits by
    tag and `main`)."""
    repo = init_repo(root / "docs" / NAME)
    commits = {}
    for tag, files in (("v1.0.0", AT_V1), ("v2.0.0", AT_V2), ("main", AT_MAIN)):
        for stale in (repo / "content").glob("*.md") if (repo / "content").is_dir() else []:
            stale.unlink()
        write_files(repo, files)
        commits[tag] = commit_all(repo, tag)
        if tag != "main":
            git(repo, "tag", tag)
    return root / "docs", commits


class CountingEmbedder:
    """The real embedder, counting the texts it is given (`texts`, every call's in order)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.texts: list[str] = []

    def embed(self, texts: Any) -> Any:
        self.texts += list(texts)
        return self.inner.embed(texts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def ledger_hashes(state_dir: Path, family: str) -> set[str]:
    """The content hashes the vector ledger of `family` holds, read from its file."""
    import sqlite3

    path = state_dir / "vectors" / f"{family}.sqlite"
    if not path.exists():
        return set()
    conn = sqlite3.connect(path)
    try:
        return {h for (h,) in conn.execute("SELECT hash FROM vectors")}
    finally:
        conn.close()
