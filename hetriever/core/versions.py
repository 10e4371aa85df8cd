"""Versions of a repository: refs an operator follows beside the checked-out tree (a
release branch, a tag), each indexed as a repository of its own named `<base>--<slug>`.

A version is a repository in every way the store, the catalog and the guarantees know
(its own collection, runs, deletes, crash safety, followers, migration); what makes it a
version is its catalog record's settings (`version_of`, `version`, `ref`), never its name
alone, so a repository whose directory happens to hold `--` is not taken for one. The
checked-out tree is the repository itself, the version a search sees when it names none.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from hetriever.core.names import NAME_MAX

SEPARATOR = "--"
CURRENT = "current"  # the checked-out tree: a search that names no version sees it
ALL = "all"  # every indexed version, a page's versions grouped into one result

_SETTING_KEYS = ("version_of", "version", "ref")


def version_slug(label: str) -> str:
    """`v0.140.0` -> `v0-140-0`: lower-cased, each run of other characters one dash."""
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def version_name(base: str, label: str) -> str:
    """The repository name of version `label` of `base`, within the 63-character limit (a
    long one keeps a hash of the label so two labels never share a name)."""
    slug = version_slug(label) or "v"
    name = f"{base}{SEPARATOR}{slug}"
    if len(name) <= NAME_MAX:
        return name
    digest = hashlib.sha256(label.encode("utf-8")).hexdigest()[:8]
    room = NAME_MAX - len(base) - len(SEPARATOR) - len(digest) - 1
    if room < 1:
        base = base[: NAME_MAX - len(SEPARATOR) - len(digest) - 2].rstrip("-")
        room = 1
    return f"{base}{SEPARATOR}{slug[:room].strip('-') or 'v'}-{digest}"


@dataclass(frozen=True)
class VersionOf:
    """What makes a repository a version: its base repository, the label people use
    (`v0.140.0`, `release-1.30`) and the git ref it follows (usually the label)."""

    base: str
    label: str
    ref: str

    @property
    def name(self) -> str:
        return version_name(self.base, self.label)

    def to_settings(self) -> dict[str, str]:
        return {"version_of": self.base, "version": self.label, "ref": self.ref}


def version_from_settings(settings: dict[str, Any] | None) -> VersionOf | None:
    """The version a catalog record's settings describe; None for a repository's own tree."""
    if not settings or not all(isinstance(settings.get(k), str) for k in _SETTING_KEYS):
        return None
    if not settings["version_of"] or not settings["version"]:
        return None
    return VersionOf(settings["version_of"], settings["version"], settings["ref"])


def versions_of_base(version_settings: dict[str, dict[str, Any]], base: str) -> list[str]:
    """The names of `base`'s versions, from the catalog's `version_settings()`, sorted."""
    return sorted(
        name
        for name, settings in version_settings.items()
        if (version := version_from_settings(settings)) is not None and version.base == base
    )
