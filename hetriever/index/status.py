"""A repository's status: what its index holds against its checkout and its upstream, built
here once for every surface that shows it (`hetriever status`, `GET /repositories`, MCP
`list_repositories`).

The catalog is the source of truth; the collection metadata (given by a caller that reads it,
the CLI) fills in for a repository the catalog has not seen (an index made before it
existed), and is where that caller's chunk count comes from (the last recorded run's; a
server counts the catalog's). The
checked-out commit is known only where the docs root is (`repo` given): elsewhere it, the
up-to-date flag and the upstream are unknown, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hetriever.core.errors import HetrieverError
from hetriever.core.redact import public_url
from hetriever.core.versions import version_from_settings
from hetriever.discover.changes import head_commit
from hetriever.discover.repositories import Repository
from hetriever.discover.upstream import Upstream, upstream
from hetriever.store.catalog_records import INDEXED


@dataclass(frozen=True)
class RepositoryStatus:
    repository: str
    access_level: str
    indexed_commit: str = ""
    checked_out: str | None = None  # None: no checkout here, or it cannot be read
    checkout_error: str = ""  # why it cannot be read
    upstream: Upstream = field(default_factory=Upstream)
    files: int = 0
    chunks: int = 0
    last_run_at: str = ""
    last_run_outcome: str = ""
    url: str = ""  # the remote as recorded (may hold credentials)
    # a version's label, ref and base (hetriever.core.versions); "" for a checkout's own tree
    version: str = ""
    ref: str = ""
    version_of: str = ""

    def version_fields(self) -> dict[str, str]:
        return {"version": self.version, "ref": self.ref, "version_of": self.version_of}

    @property
    def up_to_date(self) -> bool | None:
        if self.checked_out is None:
            return None
        return bool(self.indexed_commit) and self.indexed_commit == self.checked_out

    def served(self) -> dict[str, Any]:
        """As `GET /repositories` and MCP answer it (`hetriever.serve.schemas.Repository`):
        the remote without credentials, and only a network address (a clone from a
        directory here would name a server path)."""
        return {
            "repository": self.repository,
            "url": public_url(self.url),
            "access_level": self.access_level,
            "indexed_commit": self.indexed_commit,
            "checked_out_commit": self.checked_out,
            "up_to_date": self.up_to_date,
            **self.upstream.to_dict(),
            "files": self.files,
            "chunks": self.chunks,
            "last_run_at": self.last_run_at,
            "last_run_outcome": self.last_run_outcome,
            **self.version_fields(),
        }


def checked_out(repo: Repository | None) -> tuple[str | None, str]:
    """(the checkout's commit, or None; why not, for a repository that is here)."""
    if repo is None:
        return None, ""
    try:
        return head_commit(repo), ""
    except HetrieverError as exc:  # no commits, a submodule not checked out: said, not raised
        return None, str(exc)


def repository_status(
    catalog: Any,
    name: str,
    collection: str | None,
    access_level: str,
    *,
    repo: Repository | None = None,
    meta: dict[str, Any] | None = None,
    fetch: bool = False,
) -> RepositoryStatus:
    """Repository `name`'s status from the catalog (its active `collection`, if any), the
    collection metadata `meta` where the caller reads it, and its checkout `repo` where it is
    here (`fetch`: fetch the followed branch first, for `status --fetch`)."""
    served = meta is None  # a server reads the catalog only
    meta = meta or {}
    record = catalog.repository(name) if catalog is not None else None
    counts = catalog.file_counts(collection) if catalog is not None and collection else {}
    indexed = (
        record.last_commit if record and record.last_commit else str(meta.get("commit_hash", ""))
    )
    head, error = checked_out(repo)
    version = (repo.version if repo else None) or version_from_settings(
        record.settings if record else None
    )
    waiting = upstream(repo, indexed, fetch_first=fetch) if head and repo else Upstream()
    return RepositoryStatus(
        repository=name,
        access_level=access_level,
        indexed_commit=indexed,
        checked_out=head,
        checkout_error=error,
        upstream=waiting,
        files=counts.get(INDEXED, meta.get("total_documents", 0)),
        chunks=counts.get("chunks", 0) if served else meta.get("total_chunks", 0),
        last_run_at=record.last_run_at if record else "",
        last_run_outcome=record.last_run_outcome if record else "",
        url=record.url if record else "",
        version=version.label if version else "",
        ref=version.ref if version else "",
        version_of=version.base if version else "",
    )
