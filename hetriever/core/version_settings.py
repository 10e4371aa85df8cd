"""The `versions` setting: which refs of a repository are followed beside its checked-out
tree, each indexed as a version of its own (`hetriever.core.versions`).

A repository's spec names refs outright (`refs`: branches or tags), or the last N tags
matching a glob (`tags` with `last`), or both. Written as JSON in `HETRIEVER_VERSIONS`
(`{"hugo-docs": {"tags": "v*", "last": 3}}`) or as a table in the config file.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

LAST_MAX = 100  # each version is a collection and a run of its own


def _check_ref(ref: str) -> str:
    """A ref as git would take it on a command line, never an option or a range."""
    ref = ref.strip()
    if not ref:
        raise ValueError("a ref must not be empty")
    if ref.startswith("-") or any(c.isspace() for c in ref) or ".." in ref or "\\" in ref:
        raise ValueError(f"{ref!r} is not a branch or tag name")
    if any(c in ref for c in "~^:?*[") or ref.endswith((".", "/", ".lock")):
        raise ValueError(f"{ref!r} is not a branch or tag name")
    return ref


class VersionSpec(BaseModel):
    """The refs one repository follows: `refs` outright, and the `last` N tags matching the
    glob `tags`, newest first by git's version-aware sort (`--sort=-v:refname`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    refs: list[str] = Field(default_factory=list)
    tags: str = ""
    last: int = 0

    @field_validator("refs", mode="before")
    @classmethod
    def _one_or_many(cls, raw: Any) -> Any:
        return [raw] if isinstance(raw, str) else raw

    @field_validator("refs")
    @classmethod
    def _refs(cls, refs: list[str]) -> list[str]:
        checked = [_check_ref(r) for r in refs]
        if len(set(checked)) != len(checked):
            raise ValueError("a ref is listed twice")
        return checked

    @model_validator(mode="after")
    def _tags_and_last(self) -> VersionSpec:
        glob = self.tags.strip()
        if glob and (glob.startswith("-") or any(c.isspace() for c in glob)):
            raise ValueError(f"tags {glob!r} is not a tag glob such as 'v*'")
        if glob and not 1 <= self.last <= LAST_MAX:
            raise ValueError(f"tags {glob!r} needs last: how many of them, 1..{LAST_MAX}")
        if self.last and not glob:
            raise ValueError("last needs tags: the glob the tags match, such as 'v*'")
        if not glob and not self.refs:
            raise ValueError("names no version: give refs, or tags with last")
        return self

    def follows_tag(self, tag: str) -> bool:
        """Whether a tag of this name is followed: named in `refs`, or matching `tags` (one
        of the last N once listed)."""
        return tag in self.refs or bool(self.tags and fnmatch.fnmatchcase(tag, self.tags))
