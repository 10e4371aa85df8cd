"""`hetriever diff REPOSITORY FROM TO`: the published pages added, removed, changed and
renamed between two indexed versions (`hetriever.search.version_diff`), printed as written
(`hetriever.commands.output`), or as JSON."""

from __future__ import annotations

import argparse

from hetriever.commands.common import EXIT_OK, cli_settings, make_console, print_json, require_index


def cmd_diff(args: argparse.Namespace) -> int:
    from hetriever.commands.output import one_line, plain
    from hetriever.core.names import as_given, validate_collection_name
    from hetriever.search.version_diff import version_diff
    from hetriever.store.knowledge_store import get_knowledge_store

    settings = cli_settings(args)
    repository = (as_given([args.repository]) or [args.repository])[0]
    validate_collection_name(repository)
    require_index(settings)
    access = [level for raw in (args.access or []) for level in raw.split(",") if level.strip()]
    diff = version_diff(
        get_knowledge_store(settings), repository, args.old, args.new, levels=access or None
    )
    if args.json:
        print_json({**diff.to_dict(), "counts": diff.counts})
        return EXIT_OK
    console = make_console()
    counts = ", ".join(f"{n} {kind}" for kind, n in diff.counts.items())
    console.print(
        plain(
            f"{diff.repository}: {diff.from_version} ({diff.from_commit[:12]}) -> "
            f"{diff.to_version} ({diff.to_commit[:12]}): {len(diff.changes)} pages ({counts})"
        ),
        highlight=False,
    )
    for change in diff.changes:
        moved = f" (from {one_line(change.old_path)})" if change.old_path else ""
        where = f"  {one_line(change.url)}" if change.url else ""
        title = f"  {one_line(change.title)}" if change.title else ""
        console.print(
            plain(f"{change.kind} {one_line(change.path)}{moved}{where}{title}"), highlight=False
        )
    return EXIT_OK
