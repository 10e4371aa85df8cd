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

The catalog is shared with ingest runs, which hold its write lock while they write. No SQLite
call runs on the event loop (each goes to a worker thread), each waits at most
`catalog_timeout` (1 s) for the lock, and a delivery that could not be claimed in that time is
queued on disk and answered 202 `queued` (webhooks/queue.py says why not 503), so `/healthz`
and every answer come at once whatever a writer does.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
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

from hetriever.core.config import Settings, WebhookSettings, load_settings
from hetriever.core.errors import ConfigurationError
from hetriever.core.logs import get_logger
from hetriever.core.names import repository_name
from hetriever.core.redact import redact_text
from hetriever.core.version_settings import VersionSpec
from hetriever.store.catalog_schema import CATALOG_FILE
from webhooks.deliveries import CatalogBusy, DeliveryStore
from webhooks.queue import DeliveryQueue, QueuedDelivery, queued_now

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
DEFAULT_CATALOG_TIMEOUT = WebhookSettings.model_fields["catalog_timeout"].default
QUEUE_INTERVAL = 2.0  # seconds between tries of the queued deliveries
RETRY_AFTER = "30"  # seconds, on a 503: for senders that retry (GitHub does not)

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
    catalog_timeout: float = DEFAULT_CATALOG_TIMEOUT  # for the catalog's write lock
    queue_interval: float = QUEUE_INTERVAL
    # The versions setting: a push of a followed tag or branch starts its repository's run.
    versions: dict[str, VersionSpec] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 < self.catalog_timeout <= 5:
            raise ConfigurationError(
                "HETRIEVER_WEBHOOK_CATALOG_TIMEOUT must be more than 0 and at most 5 seconds",
                hint="GitHub waits 10 s for an answer, Prefect's call included",
            )
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
    def from_settings(
        cls, settings: Settings, env: Mapping[str, str] | None = None
    ) -> WebhookConfig:
        """The service's configuration from `settings.webhook` (HETRIEVER_WEBHOOK_*)."""
        env = os.environ if env is None else env
        hook = settings.webhook
        secret = hook.secret.get_secret_value()
        if not secret and hook.secret_file is not None:
            try:
                secret = hook.secret_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigurationError(
                    f"{ENV_SECRET_FILE} cannot be read: {exc}", hint="point it at a readable file"
                ) from None
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
            catalog_timeout=hook.catalog_timeout,
            versions=dict(settings.versions),
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
    candidates = [
        repo.get("full_name"),
        repo.get("clone_url"),
        repo.get("ssh_url"),
        repo.get("html_url"),
        repo.get("git_url"),
    ]
    names = [normalise_github_repo(c) for c in candidates if isinstance(c, str) and c]
    route = next((config.repos[n] for n in names if n in config.repos), None)
    full_name = repo.get("full_name") or (names[0] if names else "?")
    if route is None:
        raise _ignored(f"repository {full_name} is not a configured documentation repository")
    ref = payload.get("ref")
    spec = config.versions.get(route.docs_name)
    if isinstance(ref, str) and ref.startswith("refs/tags/") and spec is not None:
        # A followed version's tag: a run of the repository, whose fetch brings the tag in
        # and whose versions are listed again after it (branch "": the followed one).
        tag = ref.removeprefix("refs/tags/")
        if not spec.follows_tag(tag):
            raise _ignored(f"tag {tag!r} is not a followed version of {route.docs_name}")
        branch = ""
    elif not isinstance(ref, str) or not ref.startswith("refs/heads/"):
        raise _ignored(f"ref {ref!r} is not a branch")
    else:
        branch = ref.removeprefix("refs/heads/")
        wanted = route.branch or repo.get("default_branch")
        if not wanted:
            raise _error(400, "push payload has no repository.default_branch")
        if branch != wanted and spec is not None and branch in spec.refs:
            branch = ""  # a followed version's branch: its versions resolve after the fetch
        elif branch != wanted:
            raise _ignored(f"push to branch {branch!r}, not {wanted!r}")
    after = payload.get("after")
    if payload.get("deleted") or after == _ZERO_SHA:
        raise _ignored(f"{ref} was deleted")
    if not isinstance(after, str) or not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", after):
        raise _error(400, "push payload has no valid 'after' commit sha")
    return route.docs_name, branch, after


class PrefectUnavailable(Exception):
    """Prefect could not create the flow run; the delivery may be retried later."""


async def start_ingest(
    config: WebhookConfig, repository: str, branch: str, delivery_id: str
) -> str:
    """Schedule one ingest run of `repository` at the head of `branch` as the run fetches it
    (not the pushed commit: see the module's docstring), or for a followed version's push
    (`branch` ""), at the branch scheduled runs follow, with its versions; return the flow
    run id."""
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
                        parameters={
                            "repositories": [repository],
                            "fetch": True,
                            # "": the branch scheduled runs follow (a version's push)
                            "ref": f"refs/heads/{branch}" if branch else None,
                        },
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
    store = DeliveryStore(
        config.state_dir / CATALOG_FILE,  # a table of the catalog file
        busy_timeout=config.catalog_timeout,
    )
    queue = DeliveryQueue(config.state_dir)

    async def off_loop(fn: Any, *args: Any) -> Any:
        """`fn(*args)` on a worker thread: SQLite never blocks the event loop."""
        return await anyio.to_thread.run_sync(fn, *args)

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
            status, body = (
                400,
                {"status": "error", "error": "the client disconnected before its body was read"},
            )
        outcome = body.get("status")
        level = log.error if status >= 500 else log.warning if status >= 400 else log.info
        level(
            "webhook_delivery",
            delivery=delivery or None,
            gh_event=event or None,
            repository=body.get("repository"),
            outcome=outcome,
            http_status=status,
            reason=body.get("reason") or body.get("error"),
        )
        headers = {"Retry-After": RETRY_AFTER} if status == 503 else None
        return JSONResponse(body, status_code=status, headers=headers)

    async def _handle(request: Request, delivery: str, event: str) -> tuple[int, dict[str, Any]]:
        raw = await _read_body(request, config.max_body)
        _check_signature(config.secret, raw, request.headers.get("x-hub-signature-256"))
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            raise _error(
                415,
                f"content type {ctype or 'none'!r} is not application/json; "
                "set the GitHub webhook's content type to application/json",
            )
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
        try:
            claimed = await off_loop(store.claim, delivery, repository, digest)
            if not claimed:
                previous = await off_loop(store.get, delivery, digest) or {}
                return 200, {
                    "status": "duplicate",
                    "repository": repository,
                    "flow_run_id": previous.get("flow_run_id"),
                    "delivery": previous.get("delivery_id"),
                }
        except CatalogBusy:
            return await _queue(queued_now(delivery, repository, branch, commit, digest))
        try:
            flow_run_id = await start_ingest(config, repository, branch, delivery)
        except PrefectUnavailable as exc:
            await _release(delivery, repository, branch, commit, digest)
            return 503, {
                "status": "error",
                "repository": repository,
                "error": redact_text(str(exc)),
            }  # PREFECT_API_URL may hold a login
        except BaseException:
            with anyio.CancelScope(shield=True):
                await _release(delivery, repository, branch, commit, digest)
            raise
        await _complete(delivery, flow_run_id)
        return 202, {
            "status": "started",
            "repository": repository,
            "branch": branch,
            "ref": payload.get("ref"),
            "commit": commit,
            "flow_run_id": flow_run_id,
        }

    async def _queue(item: QueuedDelivery) -> tuple[int, dict[str, Any]]:
        try:
            await off_loop(queue.put, item)
        except OSError as exc:
            log.error("webhook_queue_unwritable", error=str(exc))
            return 503, {
                "status": "error",
                "repository": item.repository,
                "error": "another process is writing the catalog and the delivery "
                f"could not be queued ({exc.strerror or exc}); redeliver it",
            }
        log.info(
            "webhook_queued",
            delivery=item.delivery,
            repository=item.repository,
            waiting=await off_loop(len, queue),
        )
        return 202, {
            "status": "queued",
            "repository": item.repository,
            "branch": item.branch,
            "commit": item.commit,
            "delivery": item.delivery,
            "reason": "another process is writing the catalog; the run is started "
            "as soon as it is free",
        }

    async def _release(
        delivery: str, repository: str, branch: str, commit: str, digest: str
    ) -> None:
        try:
            await off_loop(store.release, delivery)
        except CatalogBusy:  # the claim stays: the queue retries the delivery
            with contextlib.suppress(OSError):
                await off_loop(queue.put, queued_now(delivery, repository, branch, commit, digest))

    async def _complete(delivery: str, flow_run_id: str) -> None:
        try:
            await off_loop(store.complete, delivery, flow_run_id)
        except CatalogBusy:  # the run is started; only its id goes unrecorded
            log.warning("webhook_run_id_unrecorded", delivery=delivery, flow_run_id=flow_run_id)

    async def drain() -> None:
        """Start what waits in the queue, oldest first, while the catalog is free."""
        for item in await off_loop(queue.items):
            try:
                if not await off_loop(
                    store.claim, item.delivery, item.repository, item.body_digest
                ):
                    previous = await off_loop(store.get, item.delivery, item.body_digest) or {}
                    # a claim of its own left without a run (its release found the lock
                    # held) is started; any other is a duplicate
                    if previous.get("delivery_id") != item.delivery or previous.get("flow_run_id"):
                        log.info(
                            "webhook_queued_duplicate",
                            delivery=item.delivery,
                            repository=item.repository,
                            flow_run_id=previous.get("flow_run_id"),
                        )
                        await off_loop(queue.done, item)
                        continue
            except CatalogBusy:
                return  # still written to: the next round
            try:
                flow_run_id = await start_ingest(
                    config, item.repository, item.branch, item.delivery
                )
            except PrefectUnavailable as exc:
                with contextlib.suppress(CatalogBusy):
                    await off_loop(store.release, item.delivery)
                log.warning(
                    "webhook_queued_waiting",
                    delivery=item.delivery,
                    repository=item.repository,
                    error=redact_text(str(exc)),
                )
                return
            await _complete(item.delivery, flow_run_id)
            await off_loop(queue.done, item)
            log.info(
                "webhook_queued_started",
                delivery=item.delivery,
                repository=item.repository,
                flow_run_id=flow_run_id,
            )

    async def drain_forever() -> None:
        while True:
            await anyio.sleep(config.queue_interval)
            try:
                await drain()
            except Exception as exc:  # a bug, or the disk: logged, tried again
                log.exception("webhook_queue_failed", error=str(exc))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(drain_forever)
            yield
            tasks.cancel_scope.cancel()
        await off_loop(store.close)

    app = Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/webhook", webhook, methods=["POST"]),
        ],
        lifespan=lifespan,
    )
    app.state.config = config
    app.state.deliveries = store
    app.state.queue = queue
    return app


def serve(
    host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, config: WebhookConfig | None = None
) -> None:
    """Run the service in the foreground until interrupted."""
    from hetriever.serve import slow_clients

    config = config or WebhookConfig.from_env()
    log.info(
        "webhook_serving",
        host=host,
        port=port,
        deployment=config.deployment,
        repositories=sorted(r.docs_name for r in config.repos.values()),
    )
    slow_clients.run(
        create_app(config),
        host=host,
        port=port,
        timeout=config.request_timeout,
        log_level="warning",
    )
