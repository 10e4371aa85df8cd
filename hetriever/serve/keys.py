"""API keys for the search API and the MCP server: which access levels a caller gets.

Keys are kept hashed (sha256 of the key), one per line, in the file named by
`HETRIEVER_API_KEYS_FILE` and/or in `HETRIEVER_API_KEYS` (lines or `;`-separated entries):

    <name> sha256:<64 hex digits> <LEVEL>[,<LEVEL>...]

`hetriever serve --new-key TEAM` prints a fresh key and the line to add. A caller without a key
is PUBLIC; a key grants its listed levels plus PUBLIC. SYSTEM is never granted over the wire: a
line naming it is refused at start-up, like any malformed line (a clear one-line error, so a
typo cannot silently open or close access).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hetriever.core.access import DEFAULT_CALLER_LEVELS
from hetriever.core.config import ACCESS_LEVELS
from hetriever.core.errors import ConfigurationError, UserError

ENV_KEYS = "HETRIEVER_API_KEYS"
ENV_KEYS_FILE = "HETRIEVER_API_KEYS_FILE"
ENV_CLIENT_KEY = "HETRIEVER_API_KEY"  # the key an MCP stdio server runs with
GRANTABLE = tuple(level for level in ACCESS_LEVELS if level != "SYSTEM")
PUBLIC_LEVELS = frozenset(DEFAULT_CALLER_LEVELS)
MAX_KEY_CHARS = 256
_HASH = re.compile(r"^sha256:([0-9a-f]{64})$")


class InvalidKeyError(UserError):
    """A presented API key matches no configured key (answered with 401, nothing else said)."""


def hash_key(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key(levels: str) -> tuple[str, str]:
    """A fresh random key and the key-file line that grants it `levels`."""
    granted = _levels(levels, "--new-key")
    key = "htr_" + secrets.token_urlsafe(32)
    return key, f"key-{secrets.token_hex(3)} {hash_key(key)} {','.join(sorted(granted))}"


def _levels(raw: str, where: str) -> frozenset[str]:
    words = [w.strip().upper() for w in raw.split(",") if w.strip()]
    bad = [w for w in words if w not in GRANTABLE]
    if not words or bad:
        raise ConfigurationError(
            f"{where}: {'no level given' if not words else 'cannot grant ' + ', '.join(bad)}",
            hint=f"a key grants one or more of {', '.join(GRANTABLE)} (never SYSTEM)",
        )
    return frozenset(words)


@dataclass(frozen=True)
class KeyRing:
    """Hashed keys -> the levels they grant."""

    grants: Mapping[str, frozenset[str]]  # sha256 hex digest -> levels (PUBLIC included)
    names: Mapping[str, str]  # digest -> the key's name, for logs (never the key)

    @classmethod
    def parse(cls, text: str, source: str) -> KeyRing:
        grants: dict[str, frozenset[str]] = {}
        names: dict[str, str] = {}
        for number, line in enumerate(text.replace(";", "\n").splitlines(), start=1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            where = f"{source}: entry {number}"
            if len(parts) != 3:
                raise ConfigurationError(
                    f"{where}: expected `<name> sha256:<hex> <LEVELS>`",
                    hint="hash keys with `hetriever serve --new-key`",
                )
            name, digest, levels = parts
            match = _HASH.match(digest.lower())
            if not match:
                raise ConfigurationError(
                    f"{where}: the key must be stored as sha256:<64 hex>",
                    hint="never store a key in clear; use --new-key",
                )
            grants[match.group(1)] = _levels(levels, where) | PUBLIC_LEVELS
            names[match.group(1)] = name
        return cls(grants, names)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KeyRing:
        env = os.environ if env is None else env
        rings = [cls.parse(env.get(ENV_KEYS, ""), ENV_KEYS)]
        path = env.get(ENV_KEYS_FILE, "").strip()
        if path:
            try:
                text = Path(path).read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigurationError(
                    f"cannot read {ENV_KEYS_FILE} {path}: {exc.strerror}",
                    hint="point it at a readable key file",
                ) from None
            rings.append(cls.parse(text, path))
        return cls(
            {d: lv for r in rings for d, lv in r.grants.items()},
            {d: n for r in rings for d, n in r.names.items()},
        )

    def levels(self, key: str | None) -> frozenset[str]:
        """The caller's levels: PUBLIC without a key, the key's levels with a good one."""
        if key is None or key == "":
            return PUBLIC_LEVELS
        if len(key) > MAX_KEY_CHARS:
            raise InvalidKeyError("invalid API key")
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
        found = None
        for known, levels in self.grants.items():  # compare every one, in constant time each
            if hmac.compare_digest(known, digest):
                found = levels
        if found is None:
            raise InvalidKeyError("invalid API key")
        return found

    def name(self, key: str) -> str:
        return self.names.get(hashlib.sha256(key.encode("utf-8")).hexdigest(), "")


def key_from_headers(headers: Mapping[str, str]) -> str | None:
    """`Authorization: Bearer <key>` or `X-API-Key: <key>`; None when neither is sent."""
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise InvalidKeyError("invalid API key")
        return value.strip()
    key = headers.get("x-api-key")
    return key.strip() if key is not None else None
