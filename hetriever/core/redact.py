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

# A URL's authority is `[userinfo@]host[:port]`. A password may hold any character, `@`, `/`,
# `?`, `#`, quotes, `<` or a space among them (git does not make anyone escape them), so the
# userinfo is not found by splitting at the first `/`: it runs to the LAST "@" that is followed
# by a host (a name, or `[IPv6]`), an optional port and the end of the authority. What a
# `@` later in a path or query hides is redacted too: a URL may lose a little, never leak.
_SCHEME = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://")
_HOST = r"(?:\[[0-9A-Fa-f:.]+(?:%[\w.~-]+)?\]|[A-Za-z0-9._~%-]+)(?::[0-9]*)?"
_AUTHORITY_ENDS = re.compile(_HOST + r"(?=[/?#]|\Z)")  # a whole URL: what follows the host
_AUTHORITY_ENDS_IN_TEXT = re.compile(_HOST + r"(?=[/?#\s'\"<>),;\]]|\.?\Z|\.\s)")
_JUST_A_HOST = re.compile(_HOST + r"\Z")
_WHITESPACE = re.compile(r"\s")
# scp-like `[user@]host:path` (git's own syntax): a `user:password@` before the host is a
# secret; a user alone (`git@`) names an account and stays.
_SCP_HOST = r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(?!//)"
_SCP_SECRET = re.compile(r"^[^\s/:@]+:.*@(?=" + _SCP_HOST + ")", re.S)
_SCP_SECRET_IN_TEXT = re.compile(r"(?<![\w.:/@%+-])[A-Za-z0-9._~%+-]+:\S*@(?=" + _SCP_HOST + ")")
_SCP_LIKE = re.compile(r"^(?:[^\s/@]+@)?" + _SCP_HOST)
_NETWORK_SCHEMES = ("http", "https", "ssh", "git", "git+ssh", "ssh+git")


def _userinfo_ends(rest: str, authority: re.Pattern[str]) -> int:
    """Where the userinfo at the start of `rest` (the text after `scheme://`) ends, its last
    "@" included; 0 when there is none."""
    ends = 0
    for at in (i for i, c in enumerate(rest) if c == "@"):
        if authority.match(rest, at + 1):
            ends = at + 1
    return ends


def _userinfo_in_text(rest: str) -> int:
    """`_userinfo_ends` for a URL inside a message, where the URL's own end is not known.
    Within its first word the last "@" before a host wins (`...@127.0.0.1:4200/api and
    kim@example.org` keeps the address). A password with a space in it (`'https://u:pa
    ss@host/'`, as git quotes a URL it rejects) runs past that word; so the rest of the
    line is searched too when the first word ends right at the host of its last "@", or
    holds no such "@" and does not begin with a plain host (`https://host/x, mail kim@...`
    and `https://host:8080 is down` stay whole)."""
    line = rest.split("\n", 1)[0]
    space = _WHITESPACE.search(line)
    if space is None:
        return _userinfo_ends(line, _AUTHORITY_ENDS_IN_TEXT)
    word = line[: space.start()]
    ends = _userinfo_ends(word, _AUTHORITY_ENDS_IN_TEXT)
    if ends and not _JUST_A_HOST.match(word, ends):
        return ends  # the URL goes on past its host, to a path
    if not ends and _JUST_A_HOST.match(re.split(r"[/?#]", word, maxsplit=1)[0]):
        return 0  # a plain host: no userinfo
    return _userinfo_ends(line, _AUTHORITY_ENDS_IN_TEXT) or ends


def redact_url(url: str) -> str:
    """`url` without the user, password or token before its host (a URL with a scheme, or
    git's scp-like `user:password@host:path`)."""
    if not url or "@" not in url:
        return url
    found = _SCHEME.match(url.lstrip())
    if found is None:
        return _SCP_SECRET.sub("", url, count=1)
    start = len(url) - len(url.lstrip()) + found.end()
    ends = _userinfo_ends(url[start:], _AUTHORITY_ENDS)
    return url[:start] + url[start + ends :]


def redact_text(text: str) -> str:
    """`text` with the userinfo of every URL in it removed."""
    if not text or "@" not in text:
        return text
    pieces, at = [], 0
    for found in _SCHEME.finditer(text):
        if found.start() < at:  # inside a userinfo already dropped
            continue
        following = _SCHEME.search(text, found.end())
        rest = text[found.end() : following.start() if following else len(text)]
        pieces.append(text[at : found.end()])
        at = found.end() + _userinfo_in_text(rest)
    pieces.append(text[at:])
    return _SCP_SECRET_IN_TEXT.sub("", "".join(pieces))


def public_url(url: str) -> str:
    """A repository URL as a remote caller may see it: a network URL without credentials,
    else "" (a local path or `file://` URL says where things are on the server)."""
    url = (url or "").strip()
    if "://" not in url and "@" in url:  # git's scp-like form, or a path holding an "@"
        redacted = redact_url(url)
        return redacted if _SCP_LIKE.match(redacted) else ""
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
