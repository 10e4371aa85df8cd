"""Where an index lives when `chroma_path` is not set: one place per docs root, whatever the
current directory.

The default is under the user's data directory, `$XDG_DATA_HOME/hetriever/<docs root's name>-
<hash of its absolute path>/` (`~/.local/share/...` without XDG_DATA_HOME), not under the docs
root: an index inside the parent repo would show as untracked files there, be wiped by a
`git clean -fdx` of it, and land in a folder of repos where nothing of the docs belongs; the
data directory is where a tool keeps what it can rebuild. The Chroma data is `chroma/` there
and the state directory `.hetriever/` beside it (`Settings.resolved_state_dir`).

Before this default, `chroma_data` in the current directory was: an index found there (and not
at the new place) is still used, and `legacy_note` says how to keep finding it.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

LEGACY_CHROMA_PATH = Path("chroma_data")
CHROMA_FILE = "chroma.sqlite3"  # what an embedded Chroma directory holds once it has an index


def data_home() -> Path:
    raw = os.environ.get("XDG_DATA_HOME", "")
    # The XDG spec: a relative value is invalid and to be ignored.
    return Path(raw) if raw and Path(raw).is_absolute() else Path.home() / ".local" / "share"


def index_dir(docs_root: Path) -> Path:
    """The directory of the index of `docs_root`: readable name, unique by absolute path."""
    absolute = docs_root.expanduser().resolve()  # one index however the root is reached
    name = re.sub(r"[^a-z0-9]+", "-", absolute.name.lower()).strip("-") or "docs"
    digest = hashlib.sha256(str(absolute).encode()).hexdigest()[:10]
    return data_home() / "hetriever" / f"{name}-{digest}"


def default_chroma_path(docs_root: Path) -> Path:
    """The new default, unless only the old relative `chroma_data` holds an index."""
    derived = index_dir(docs_root) / "chroma"
    if not (derived / CHROMA_FILE).exists() and (LEGACY_CHROMA_PATH / CHROMA_FILE).exists():
        return LEGACY_CHROMA_PATH
    return derived


def legacy_note(chroma_path: Path, docs_root: Path) -> str:
    """A note when the index in use is the old `./chroma_data` ("" otherwise)."""
    if chroma_path != LEGACY_CHROMA_PATH:
        return ""
    absolute = Path.cwd() / LEGACY_CHROMA_PATH
    return (
        f"using the index in ./{LEGACY_CHROMA_PATH} of the current directory (the old "
        f"default); to find it from any directory, set HETRIEVER_CHROMA_PATH={absolute} "
        f"(its state, {absolute.parent / '.hetriever'}, is found beside it), or re-index "
        f"into the new default, {index_dir(docs_root) / 'chroma'}"
    )
