"""What may leave the process: repository URLs without credentials, messages without them.

A submodule or origin URL can carry a deploy token (`https://deploy-bot:ghp_...@host/x.git`):
git keeps it there, so discovery reads it there. `redact_url` strips the userinfo (user,
password, token) from a URL, `redact_text` from every URL inside a message (a git error names
the remote it failed to reach). Discovery stores URLs redacted; the HTTP API, MCP, logs,
Prefect artifacts, `status --json` and webhook answers apply these again, so an index written
before that (its catalog, its manifest) gives nothing away either. `public_url` is what a
remote caller may see: a network URL, redacted; a local path (a submodule cloned from a
directory on the server) is the server's business and is not shown.

`hide_paths` replaces the server's own directories (docs root, Chroma data, state, model) in a
message for a remote caller with what they are, e.g. `<state dir>/bm25/x.sqlite`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

# scheme://userinfo@ : the userinfo runs to the last "@" before the host's "/" (a password
# may hold an unescaped "@"); scp-like `user@host:path` names a user, never a secret.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s?#'\"<>]*@")
_NETWORK_SCHEMES = ("http", "https", "ssh", "git", "git+ssh", "ssh+git")
_SCP_LIKE = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:(?!//)")


def redact_url(url: str) -> str:
    """`url` without the user, password or token before its host."""
    return _USERINFO.sub(r"\g<scheme>", url) if url else url


def redact_text(text: str) -> str:
    """`text` with the userinfo of every URL in it removed."""
    return _USERINFO.sub(r"\g<scheme>", text) if text and "@" in text else text


def public_url(url: str) -> str:
    """A repository URL as a remote caller may see it: a network URL without credentials,
    else "" (a local path or `file://` URL says where things are on the server)."""
    url = (url or "").strip()
    if _SCP_LIKE.match(url):
        return url
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError:
        return ""
    return redact_url(url) if scheme in _NETWORK_SCHEMES else ""


def server_places(places: Iterable[tuple[str, Path | str | None]]) -> list[tuple[str, str]]:
    """(path text, label) pairs for `hide_paths`: each directory's absolute forms (as given
    when absolute, and resolved), longest first so a directory inside another is named by the
    nearer one. A relative form (`docs`) is left out: as plain text it is also a word of
    other things (`sample-docs/...`), and it says nothing of the server's layout."""
    pairs: dict[str, str] = {}
    for label, place in places:
        if not place:
            continue
        given = Path(place).expanduser()
        forms = [str(given.resolve())] + ([str(given)] if given.is_absolute() else [])
        for form in forms:
            form = form.rstrip("/")
            if len(form) > 1 and form not in pairs:  # never "/" itself
                pairs[form] = f"<{label}>"
    return sorted(pairs.items(), key=lambda p: -len(p[0]))


def hide_paths(text: str, places: list[tuple[str, str]]) -> str:
    """`text` with each server directory of `places` (from `server_places`) replaced by its
    label, and credentials removed from its URLs."""
    for path, label in places:
        if path in text:
            text = text.replace(path, label)
    return redact_text(text)
