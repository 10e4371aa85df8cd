"""Artifacts of an ingest run, written for the person reading them in the Prefect UI.

Per repository (key `ingest-<name>`), one markdown page: failures first with their full message,
then the run's counts (pages re-indexed because an included snippet changed counted apart), the
skipped files summarised by reason, and the repository's recent runs from the catalog. A no-op run
publishes nothing there, so the page keeps showing the last run that did something. The full list
of skipped files is a second artifact (`ingest-<name>-skipped`).
"""

from __future__ import annotations

import html
import re
from collections import Counter

from prefect.artifacts import acreate_markdown_artifact
from prefect.utilities.urls import url_for

from hetriever.core.models import IndexResult, SkippedFile
from hetriever.core.redact import redact_text
from hetriever.core.terminal import terminal_safe

LIST_LIMIT = 500  # files listed in the skipped-files artifact


def artifact_key(name: str) -> str:
    return "ingest-" + "".join(c if c.isalnum() or c == "-" else "-" for c in name.lower())


# Characters that would start inline markup in a table cell (emphasis, code, a link, a cell's
# end); HTML is escaped as entities. Dots, dashes and parentheses stay readable.
_INLINE = re.compile(r"([\\`*_\[\]|~])")


def _cell(text: object) -> str:
    """Text for a table cell, as written: errors and reasons quote the docs (data, never
    markup that renders), and name git remotes (never with their credentials)."""
    line = " ".join(terminal_safe(redact_text(str(text))).split())
    return _INLINE.sub(r"\\\1", html.escape(line, quote=False))


def _code(path: object) -> str:
    """A file's path as a code span (literal, HTML too): fenced by more backticks than it
    holds; a pipe escaped, which a table needs even there."""
    text = " ".join(terminal_safe(str(path)).split())
    ticks = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}".replace("|", "\\|")


def skip_reason_kind(reason: str) -> str:
    """The rule behind a skip, without the per-file detail ("too large: 3 MB" -> "too large")."""
    return reason.split(":", 1)[0].strip() or reason


def failures_section(failed: list[SkippedFile]) -> list[str]:
    if not failed:
        return []
    lines = [
        f"## {len(failed)} file(s) FAILED",
        "",
        "They keep their previous chunks; the commit was not recorded, so the next run "
        "tries them again.",
        "",
        "| file | error |",
        "|---|---|",
    ]
    lines += [f"| {_code(f.path)} | {_cell(f.reason)} |" for f in failed]
    return lines + [""]


def upstream_text(waiting: dict | None) -> str:
    """ "origin/main at a1b2c3d4e5f6: behind by 3 commits" (the followed remote branch as of
    the run's last fetch), or why it is unknown; "" with no remote."""
    if not waiting or not waiting.get("upstream_ref"):
        return ""
    ref, head = waiting["upstream_ref"], str(waiting.get("upstream_commit") or "")[:12]
    behind = waiting.get("behind_upstream")
    if behind is None:
        return f"{ref}: unknown ({waiting.get('upstream_error', '')})"
    return f"{ref} at {head}: " + (
        "up to date" if behind == 0 else f"behind by {behind} commit{'s' if behind != 1 else ''}"
    )


def counts_section(result: IndexResult, waiting: dict | None = None) -> list[str]:
    rows = [
        ("mode", result.mode),
        ("commit", f"{(result.old_commit or '-')[:12]} -> {result.new_commit[:12]}"),
        (
            "files added / modified / deleted / renamed",
            f"{result.files_added} / {result.files_modified} / {result.files_deleted} / "
            f"{result.files_renamed}",
        ),
        ("pages re-indexed because an included snippet changed", result.files_include_dependent),
        ("files re-checked because a publish or expiry date passed", result.files_republished),
        ("files indexed", result.files_indexed),
        ("files skipped", result.files_skipped),
        ("files failed", len(result.failed)),
        ("chunks embedded and written", result.chunks_written - result.chunks_borrowed),
        *(
            [("chunks written with another version's vectors", result.chunks_borrowed)]
            if result.chunks_borrowed
            else []
        ),
        ("chunks reused (unchanged)", result.chunks_reused),
        ("chunks deleted", result.chunks_deleted),
        ("embedding seconds", round(result.embedding_seconds, 2)),
        ("total seconds", round(result.total_seconds, 2)),
        ("commit recorded", result.completed),
        *([("upstream", upstream_text(waiting))] if upstream_text(waiting) else []),
    ]
    return [
        "## This run",
        "",
        "| | |",
        "|---|---|",
        *[f"| {name} | {_cell(value)} |" for name, value in rows],
        "",
    ]


def skips_section(skipped: list[SkippedFile], key: str) -> list[str]:
    if not skipped:
        return []
    by_kind = Counter(skip_reason_kind(s.reason) for s in skipped)
    lines = [f"## {len(skipped)} file(s) skipped, by reason", "", "| reason | files |", "|---|---|"]
    lines += [f"| {_cell(kind)} | {n} |" for kind, n in by_kind.most_common()]
    return lines + ["", f"Every file with its reason: artifact `{key}-skipped`.", ""]


def history_section(runs: list[dict]) -> list[str]:
    if not runs:
        return []
    lines = [
        "## Recent runs",
        "",
        "| started | mode | commit | outcome | embedded | reused | deleted | failed | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        c = run.get("counts", {})
        lines.append(
            f"| {run['started_at']} | {run['mode']} | {run['new_commit'][:12]} | "
            f"{_cell(run['outcome'] + (': ' + run['error'] if run.get('error') else ''))} | "
            f"{c.get('chunks_written', '')} | {c.get('chunks_reused', '')} | "
            f"{c.get('chunks_deleted', '')} | {c.get('files_failed', '')} | "
            f"{round(c['total_seconds'], 1) if 'total_seconds' in c else ''} |"
        )
    return lines + [""]


def repository_markdown(result: IndexResult, runs: list[dict], waiting: dict | None = None) -> str:
    key = artifact_key(result.repository)
    status = "FAILED" if result.failed or not result.completed else "ok"
    return "\n".join(
        [
            f"# Ingest of {result.repository}: {status}",
            "",
            *failures_section(result.failed),
            *counts_section(result, waiting),
            *skips_section(result.skipped, key),
            *history_section(runs),
        ]
    )


def skipped_markdown(result: IndexResult) -> str:
    shown = sorted(result.skipped, key=lambda s: (skip_reason_kind(s.reason), s.path))
    lines = [f"| {_code(s.path)} | {_cell(s.reason)} |" for s in shown[:LIST_LIMIT]]
    more = len(shown) - len(lines)
    return "\n".join(
        [
            f"# Skipped files in {result.repository}",
            "",
            "| file | reason |",
            "|---|---|",
            *lines,
            *([f"\n…and {more} more"] if more > 0 else []),
        ]
    )


async def publish_repository(
    result: IndexResult, runs: list[dict], waiting: dict | None = None
) -> None:
    if result.mode == "noop":
        return  # keep the last real run's page; the flow run's own log says "up to date"
    key = artifact_key(result.repository)
    await acreate_markdown_artifact(
        key=key,
        markdown=repository_markdown(result, runs, waiting),
        description=f"Ingest of {result.repository}",
    )
    if result.skipped:
        await acreate_markdown_artifact(
            key=key + "-skipped",
            markdown=skipped_markdown(result),
            description=f"Files of {result.repository} that were not indexed, with reasons",
        )


def report_cell(outcome: dict) -> str:
    """Where a repository's own page is: its run (`index-<name>`), linked where the Prefect UI
    is known, and the page's artifact key."""
    run_id = outcome.get("run_id")
    if not run_id:
        return ""
    key = artifact_key(outcome["repository"])
    link = url_for("flow-run", obj_id=run_id)
    run = f"[index-{outcome['repository']}]({link})" if link else f"index-{outcome['repository']}"
    return f"{run}, artifact `{key}`"


def summary_markdown(outcomes: list[dict]) -> str:
    """The parent run's summary: failed repositories first, with the whole error; each row
    links the repository's run, whose artifacts tab holds its page (`report_cell`)."""
    ordered = sorted(outcomes, key=lambda o: o["ok"])
    lines = [
        "| repository | result | mode | indexed | skipped | failed | embedded | reused "
        "| deleted | upstream | report |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for o in ordered:
        # the error after the repository's name, once (a git error names it already)
        error = str(o.get("error", "")).removeprefix(f"{o['repository']}: ")
        result = "ok" if o["ok"] else "FAILED: " + _cell(f"{o['repository']}: {error}")
        lines.append(
            f"| {o['repository']} | {result} | {o.get('mode', '')} "
            f"| {o.get('files_indexed', '')} | {len(o.get('skipped', []))} "
            f"| {len(o.get('failed', []))} | {o.get('chunks_written', '')} "
            f"| {o.get('chunks_reused', '')} | {o.get('chunks_deleted', '')} "
            f"| {_cell(upstream_text(o))} | {report_cell(o)} |"
        )
    return "\n".join(lines)
