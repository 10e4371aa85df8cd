"""What a person is told when a checkout is behind the remote branch it follows: how many
commits wait there, and the command that brings them in by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def update_command(docs_root: Path, repo: Any) -> str:
    """The by-hand update of `repo`: `git submodule update --remote` for a submodule of the
    docs root (the README's line), else a fast-forward pull of the clone; then an ingest.

    git 2.38 and later refuse a local-path remote in submodule commands unless the
    submodule's own config allows it (the README's recipe sets it): where it does not, the
    line sets it first, so it works as printed."""
    root, path = Path(docs_root).absolute(), Path(repo.path).absolute()
    if (root / ".gitmodules").is_file() and path.is_relative_to(root) and path != root:
        allow = ("" if not _local(repo.url) or _file_allowed(repo)
                 else f"git -C {path} config protocol.file.allow always && ")
        return (f"{allow}git -C {root} submodule update --remote {path.relative_to(root)} "
                "&& hetriever ingest")
    return f"git -C {path} pull --ff-only && hetriever ingest"


def _local(url: str) -> bool:
    """A remote that is a path (`/src/site-a`, `../site-a`, `file://...`), not a host's."""
    if url.startswith("file://"):
        return True
    return bool(url) and "://" not in url and ":" not in url.split("/", 1)[0]


def _file_allowed(repo: Any) -> bool:
    from hetriever.discover.git_runner import run_git

    done = run_git(repo, "config", "--get", "protocol.file.allow", timeout=10)
    return done.ok and done.text == "always"


def waiting_text(row: dict[str, Any]) -> str:
    """"origin/main has 2 more commits", from a row's upstream fields; "" when none wait."""
    behind = row.get("behind_upstream") or 0
    if behind <= 0:
        return ""
    return f"{row['upstream_ref']} has {behind} more commit{'s' if behind != 1 else ''}"


def behind_note(docs_root: Path, repo: Any, row: dict[str, Any], checked_out: bool) -> str:
    """What to say of a repository whose followed branch has commits the index lacks (as of
    the last fetch); "" when none wait. `checked_out`: the index holds the checkout, so it
    is the checkout that is behind."""
    waiting = waiting_text(row)
    if not waiting:
        return ""
    what = "checkout is behind its upstream" if checked_out else "commits wait upstream"
    return f"{what} ({waiting}); run `{update_command(docs_root, repo)}`"

