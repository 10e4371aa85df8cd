"""GitHub push webhooks -> a run of the Prefect ingest deployment for that repository.

`POST /webhook` checks, in this order: size (Content-Length, then the bytes actually read),
signature (`X-Hub-Signature-256`, HMAC-SHA256 of the raw body), content type, JSON, event type,
repository, branch, delivery id and body digest (dedup). Only then is Prefect asked for a
flow run, with `timeout=0` so the answer comes back as soon as the run is scheduled. Why a
service of our own rather than Prefect events or Cloud webhooks: docs/webhooks.md.

A push is a trigger, not a target: the run is asked to index the pushed branch's head as it
fetches it, never the push's `after` commit, so an old push replayed (its signed body sent
again under a new delivery id) cannot take the index back; the flow also refuses a commit
that is an ancestor of the indexed one.

Delivery ids, and the SHA-256 of each signed body, live in a table of the state dir's catalog
file, so a restart still dedupes. A delivery is claimed before Prefect is called and released
again if the call fails: GitHub's "redeliver" then works once Prefect is back.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from hetriever.core.redact import redact_text
from hetriever.store.catalog_records import CATALOG_FILE
from hetriever.core.config import Settings, WebhookSettings, load_settings
from hetriever.core.errors import ConfigurationError
from hetriever.core.logs import get_logger
from hetriever.core.names import repository_name
from hetriever.core.sqlite_files import connect

log = get_logger(__name__)

ENV_SECRET = "HETRIEVER_WEBHOOK_SECRET"
ENV_SECRET_FILE = "HETRIEVER_WEBHOOK_SECRET_FILE"  # e.g. a Docker secret under /run/secrets
ENV_REPOS = "HETRIEVER_WEBHOOK_REPOS"
ENV_DEPLOYMENT = "HETRIEVER_WEBHOOK_DEPLOYMENT"
ENV_MAX_BODY = "HETRIEVER_WEBHOOK_MAX_BODY"

DEFAULT_DEPLOYMENT = WebhookSettings.model_fields["deployment"].default
DEFAULT_MAX_BODY = WebhookSettings.model_fields["max_body"].default
MIN_SECRET_LENGTH = 16
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
DEFAULT_PREFECT_TIMEOUT = WebhookSettings.model_fields["prefect_timeout"].default
DELIVERY_RETENTION_SECONDS = 30 * 24 * 3600  # GitHub keeps deliveries redeliverable for less

_REPO_NAME = re.compile(r"^[a-z0-9-]{3,63}$")
_ZERO_SHA = "0" * 40


def normalise_github_repo(value: str) -> str:
    """`Owner/Name`, `https://github.com/Owner/Name.git`, `git@github.com:Owner/Name` -> `owner/name`."""
    text = value.strip().lower()
    text = re.sub(r"^[a-z+]+://", "", text)  # https://, ssh://, git://
    text = re.sub(r"^[^@/]+@", "", text)  # user@ of ssh URLs
    text = text.replace(":", "/")
    text = text.removesuffix("/").removesuffix(".git")
    parts = [p for p in text.split("/") if p]
    return "/".join(parts[-2:]) if len(parts) >= 2 else text


@dataclass(frozen=True)
class RepoRoute:
    """Where pushes of one GitHub repository go."""

    docs_name: str  # the documentation repository's name in hetriever
    branch: str | None = None  # None: the payload's repository.default_branch


@dataclass(frozen=True)
class WebhookConfig:
    secret: str = field(repr=False)  # never printed, never logged
    prefect_api_url: str
    repos: dict[str, RepoRoute] = field(default_factory=dict)  # "owner/name" -> route
    deployment: str = DEFAULT_DEPLOYMENT
    max_body: int = DEFAULT_MAX_BODY
    state_dir: Path = Path(".hetriever")
    prefect_timeout: float = DEFAULT_PREFECT_TIMEOUT
    request_timeout: float = 20.0  # headers, then the body (hetriever.serve.slow_clients)

    def __post_init__(self) -> None:
        if len(self.secret) < MIN_SECRET_LENGTH:
            raise ConfigurationError(
                f"the webhook secret is shorter than {MIN_SECRET_LENGTH} characters",
                hint=f"set {ENV_SECRET} to the secret configured on the GitHub webhook "
                     "(e.g. `python -c 'import secrets; print(secrets.token_hex(32))'`)",
            )
        if self.max_body < 1:
            raise ConfigurationError(f"{ENV_MAX_BODY} must be a positive number of bytes")
        if "/" not in self.deployment:
            raise ConfigurationError(
                f"deployment {self.deployment!r} is not of the form flow-name/deployment-name",
                hint=f"set {ENV_DEPLOYMENT}, e.g. {DEFAULT_DEPLOYMENT}",
            )
        if not self.prefect_api_url:
            raise ConfigurationError(
                "PREFECT_API_URL is not set",
                hint="point it at the Prefect server's API, e.g. http://127.0.0.1:4200/api; "
                     "the webhook service never starts a temporary Prefect server of its own",
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WebhookConfig:
        return cls.from_settings(load_settings(env), env)

    @classmethod
    def from_settings(cls, settings: Settings, env: Mapping[str, str] | None = None) -> WebhookConfig:
        """The service's configuration from `settings.webhook` (HETRIEVER_WEBHOOK_*)."""
        env = os.environ if env is None else env
        hook = settings.webhook
        secret = hook.secret.get_secret_value()
        if not secret and hook.secret_file is not None:
            try:
                secret = hook.secret_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigurationError(f"{ENV_SECRET_FILE} cannot be read: {exc}",
                                         hint="point it at a readable file") from None
        if not secret:
            raise ConfigurationError(
                f"{ENV_SECRET} (or {ENV_SECRET_FILE}) is not set",
                hint="set it to the secret configured on the GitHub webhook",
            )
        return cls(
            secret=secret,
            prefect_api_url=env.get("PREFECT_API_URL") or _prefect_api_url_setting(),
            repos=parse_repo_routes(hook.repos),
            deployment=hook.deployment or DEFAULT_DEPLOYMENT,
            max_body=hook.max_body,
            state_dir=settings.resolved_state_dir,
            prefect_timeout=hook.prefect_timeout,
            request_timeout=settings.request_timeout,
        )


def _prefect_api_url_setting() -> str:
    # The profile may set it even when the environment does not.
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value() or ""


def parse_repo_routes(raw: str) -> dict[str, RepoRoute]:
    """`owner/name=docs-name[@branch],...` (the key may also be a clone URL; the docs name
    may be the submodule directory's, `opentelemetry.io` for `opentelemetry-io`)."""
    routes: dict[str, RepoRoute] = {}
    for item in (p.strip() for p in raw.split(",")):
        if not item:
            continue
        key, sep, target = item.partition("=")
        docs_name, _, branch = target.strip().partition("@")
        docs_name = repository_name(docs_name)
        github = normalise_github_repo(key)
        if not sep or github.count("/") != 1 or not _REPO_NAME.match(docs_name):
            raise ConfigurationError(
                f"{ENV_REPOS} entry {item!r} is not owner/name=docs-repo-name[@branch]",
                hint="docs repository names are 3-63 characters of a-z, 0-9 and '-'",
            )
        routes[github] = RepoRoute(docs_name=docs_name, branch=branch or None)
    return routes


# --- delivery dedup ------------------------------------------------------------------


class DeliveryStore:
    """Delivery ids already acted on, in SQLite so that a restart still dedupes."""

    def __init__(self, path: Path, retention_seconds: float = DELIVERY_RETENTION_SECONDS) -> None:
        self.path = path
        self.retention = retention_seconds
        self._lock = threading.Lock()
        self._db = connect(path)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS webhook_deliveries ("
            " delivery_id TEXT PRIMARY KEY, received_at REAL NOT NULL,"
            " repository TEXT NOT NULL, flow_run_id TEXT)"
        )
        self._db.execute("CREATE INDEX IF NOT EXISTS webhook_deliveries_received"
                         " ON webhook_deliveries (received_at)")
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(webhook_deliveries)")}
        if "body_digest" not in columns:  # a table an earlier version created
            self._db.execute("ALTER TABLE webhook_deliveries ADD COLUMN body_digest TEXT")
        self._db.execute("CREATE INDEX IF NOT EXISTS webhook_deliveries_body"
                         " ON webhook_deliveries (body_digest)")

    def claim(self, delivery_id: str, repository: str, body_digest: str | None = None) -> bool:
        """Record the id (and the body's digest); False if either was already there within
        the retention window: the same delivery again, or the same signed body replayed under
        another id."""
        now = time.time()
        with self._lock:
            self._db.execute("DELETE FROM webhook_deliveries WHERE received_at < ?",
                             (now - self.retention,))
            if body_digest is not None and self._db.execute(
                    "SELECT 1 FROM webhook_deliveries WHERE body_digest = ?",
                    (body_digest,)).fetchone():
                return False
            cur = self._db.execute(
                "INSERT OR IGNORE INTO webhook_deliveries (delivery_id, received_at, repository,"
                " body_digest) VALUES (?, ?, ?, ?)", (delivery_id, now, repository, body_digest))
            return cur.rowcount == 1

    def complete(self, delivery_id: str, flow_run_id: str) -> None:
        with self._lock:
            self._db.execute("UPDATE webhook_deliveries SET flow_run_id = ? WHERE delivery_id = ?",
                             (flow_run_id, delivery_id))

    def release(self, delivery_id: str) -> None:
        """Forget a claimed id whose run could not be started, so a redelivery is honoured."""
        with self._lock:
            self._db.execute("DELETE FROM webhook_deliveries WHERE delivery_id = ?", (delivery_id,))

    def get(self, delivery_id: str, body_digest: str | None = None) -> dict[str, Any] | None:
        """The delivery with this id, else the one with this body digest."""
        with self._lock:
            row = self._db.execute(
                "SELECT delivery_id, received_at, repository, flow_run_id"
                " FROM webhook_deliveries WHERE delivery_id = ? OR body_digest = ?"
                " ORDER BY delivery_id = ? DESC LIMIT 1",
                (delivery_id, body_digest, delivery_id)).fetchone()
        if row is None:
            return None
        return dict(zip(("delivery_id", "received_at", "repository", "flow_run_id"), row))

    def close(self) -> None:
        with self._lock:
            self._db.close()


# --- the app -------------------------------------------------------------------------


class _Reject(Exception):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.body = body


def _error(status: int, message: str) -> _Reject:
    return _Reject(status, {"status": "error", "error": message})


def signature_for(secret: str, body: bytes) -> str:
    """The `X-Hub-Signature-256` value GitHub sends for `body`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise _error(400, "Content-Length is not a number") from None
        if size > limit:
            raise _error(413, f"body of {size} bytes is over the {limit}-byte limit")
    # Content-Length can lie or be absent (chunked): count what actually arrives.
    chunks: list[bytes] = []
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > limit:
            raise _error(413, f"body is over the {limit}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


def _check_signature(secret: str, body: bytes, header: str | None) -> None:
    if not header:
        raise _error(401, "missing X-Hub-Signature-256 header")
    if not hmac.compare_digest(signature_for(secret, body).encode(), header.strip().encode()):
        raise _error(401, "X-Hub-Signature-256 does not match the body and the shared secret")


def _ignored(reason: str) -> _Reject:
    return _Reject(202, {"status": "ignored", "reason": reason})


def _route_push(config: WebhookConfig, payload: dict[str, Any]) -> tuple[str, str, str]:
    """(docs repository name, branch, commit sha) for a push we act on; else raise 202
    ignored."""
    repo = payload.get("repository")
    if not isinstance(repo, dict):
        raise _error(400, "push payload has no repository object")
    candidates = [repo.get("full_name"), repo.get("clone_url"), repo.get("ssh_url"),
                  repo.get("html_url"), repo.get("git_url")]
    names = [normalise_github_repo(c) for c in candidates if isinstance(c, str) and c]
    route = next((config.repos[n] for n in names if n in config.repos), None)
    full_name = repo.get("full_name") or (names[0] if names else "?")
    if route is None:
        raise _ignored(f"repository {full_name} is not a configured documentation repository")
    ref = payload.get("ref")
    if not isinstance(ref, str) or not ref.startswith("refs/heads/"):
        raise _ignored(f"ref {ref!r} is not a branch")
    branch = ref.removeprefix("refs/heads/")
    wanted = route.branch or repo.get("default_branch")
    if not wanted:
        raise _error(400, "push payload has no repository.default_branch")
    if branch != wanted:
        raise _ignored(f"push to branch {branch!r}, not {wanted!r}")
    after = payload.get("after")
    if payload.get("deleted") or after == _ZERO_SHA:
        raise _ignored(f"branch {branch!r} was deleted")
    if not isinstance(after, str) or not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", after):
        raise _error(400, "push payload has no valid 'after' commit sha")
    return route.docs_name, branch, after


class PrefectUnavailable(Exception):
    """Prefect could not create the flow run; the delivery may be retried later."""


async def start_ingest(config: WebhookConfig, repository: str, branch: str,
                       delivery_id: str) -> str:
    """Schedule one ingest run of `repository` at the head of `branch` as the run fetches it
    (not the pushed commit: see the module's docstring); return the flow run id."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import arun_deployment
    from prefect.exceptions import ObjectNotFound, PrefectHTTPStatusError
    from prefect.settings import PREFECT_API_URL, temporary_settings

    try:
        with anyio.fail_after(config.prefect_timeout):
            with temporary_settings(updates={PREFECT_API_URL: config.prefect_api_url}):
                async with get_client() as client:
                    flow_run = await arun_deployment(
                        name=config.deployment,
                        client=client,
                        parameters={"repositories": [repository], "fetch": True,
                                    "ref": f"refs/heads/{branch}"},
                        timeout=0,
                        # Prefect dedupes too: a retry after a lost response reuses the run.
                        idempotency_key=f"github-delivery-{delivery_id}",
                        tags=["webhook"],
                        as_subflow=False,
                    )
    except ObjectNotFound:
        raise PrefectUnavailable(
            f"deployment {config.deployment!r} does not exist on the Prefect server; register "
            "it (`prefect deploy --all` or `python -m deployments.register`) and redeliver"
        ) from None
    except (httpx.TransportError, TimeoutError, OSError) as exc:
        raise PrefectUnavailable(
            f"the Prefect API at {config.prefect_api_url} is unreachable "
            f"({type(exc).__name__}); start the server or fix PREFECT_API_URL, then redeliver"
        ) from None
    except PrefectHTTPStatusError as exc:
        raise PrefectUnavailable(
            f"the Prefect API answered {exc.response.status_code}; check the server, then redeliver"
        ) from None
    return str(flow_run.id)


def create_app(config: WebhookConfig) -> Starlette:
    """The webhook service as an ASGI app (`serve()` runs it with uvicorn)."""
    store = DeliveryStore(config.state_dir / CATALOG_FILE)  # a table of the catalog file

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def webhook(request: Request) -> JSONResponse:
        delivery = request.headers.get("x-github-delivery", "")
        event = request.headers.get("x-github-event", "")
        try:
            status, body = await _handle(request, delivery, event)
        except _Reject as rej:
            status, body = rej.status, rej.body
        except ClientDisconnect:  # gone mid-body, or its body did not arrive in time
            status, body = 400, {"status": "error", "error": "the client disconnected "
                                                             "before its body was read"}
        outcome = body.get("status")
        level = log.error if status >= 500 else log.warning if status >= 400 else log.info
        level("webhook_delivery", delivery=delivery or None, gh_event=event or None,
              repository=body.get("repository"), outcome=outcome, http_status=status,
              reason=body.get("reason") or body.get("error"))
        return JSONResponse(body, status_code=status)

    async def _handle(request: Request, delivery: str, event: str) -> tuple[int, dict[str, Any]]:
        raw = await _read_body(request, config.max_body)
        _check_signature(config.secret, raw, request.headers.get("x-hub-signature-256"))
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            raise _error(415, f"content type {ctype or 'none'!r} is not application/json; "
                              "set the GitHub webhook's content type to application/json")
        try:
            payload = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise _error(400, f"body is not valid JSON: {exc}") from None
        except RecursionError:  # thousands of nested brackets: not a GitHub payload
            raise _error(400, "body is not valid JSON: nested too deeply") from None
        if not isinstance(payload, dict):
            raise _error(400, "body is not a JSON object")
        if event == "ping":
            return 200, {"status": "pong", "hook_id": payload.get("hook_id")}
        if event != "push":
            raise _ignored(f"event {event or 'none'!r} is not handled; only push is")
        repository, branch, commit = _route_push(config, payload)
        if not delivery:
            raise _error(400, "missing X-GitHub-Delivery header")
        digest = hashlib.sha256(raw).hexdigest()
        if not store.claim(delivery, repository, digest):
            previous = store.get(delivery, digest) or {}
            return 200, {"status": "duplicate", "repository": repository,
                         "flow_run_id": previous.get("flow_run_id"),
                         "delivery": previous.get("delivery_id")}
        try:
            flow_run_id = await start_ingest(config, repository, branch, delivery)
        except PrefectUnavailable as exc:
            store.release(delivery)
            return 503, {"status": "error", "repository": repository,
                         "error": redact_text(str(exc))}  # PREFECT_API_URL may hold a login
        except BaseException:
            store.release(delivery)
            raise
        store.complete(delivery, flow_run_id)
        return 202, {"status": "started", "repository": repository, "branch": branch,
                     "commit": commit, "flow_run_id": flow_run_id}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        store.close()

    app = Starlette(
        routes=[Route("/healthz", healthz, methods=["GET"]),
                Route("/webhook", webhook, methods=["POST"])],
        lifespan=lifespan,
    )
    app.state.config = config
    app.state.deliveries = store
    return app


def serve(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          config: WebhookConfig | None = None) -> None:
    """Run the service in the foreground until interrupted."""
    from hetriever.serve import slow_clients

    config = config or WebhookConfig.from_env()
    log.info("webhook_serving", host=host, port=port, deployment=config.deployment,
             repositories=sorted(r.docs_name for r in config.repos.values()))
    slow_clients.run(create_app(config), host=host, port=port, timeout=config.request_timeout,
                     log_level="warning")
