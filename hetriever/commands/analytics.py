"""`hetriever analytics`: what readers asked and failed to find, from the analytics file.

Tables print query text as it was given: every cell is a `rich.text.Text` (no markup is
read from data, so a query holding `[/name]` prints as written). `--json` prints the report
(`hetriever.search.analytics_report.AnalyticsReport`); `--purge` deletes every row.
"""

from __future__ import annotations

import argparse
import sqlite3
from typing import Any

from hetriever.commands.common import EXIT_OK, cli_settings, make_console, print_json
from hetriever.core.errors import HetrieverError

BAR_WIDTH = 40  # characters of the longest bar in the per-day chart


class AnalyticsUnreadable(HetrieverError):
    """The analytics file is locked past the wait or damaged."""


def _table(title: str, headers: tuple[str, ...], rows: list[tuple[Any, ...]]) -> Any:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(title), title_justify="left")
    for header in headers:
        table.add_column(Text(header))
    for row in rows:
        table.add_row(*(Text(str(cell)) for cell in row))
    return table


def _bar(value: int, most: int) -> str:
    return "█" * max(1 if value else 0, round(value / most * BAR_WIDTH)) if most else ""


def print_report(report: Any, where: str) -> None:
    console = make_console()

    def say(text: str) -> None:
        console.print(text, markup=False, highlight=False)

    if not report.enabled:
        say(
            "search analytics is off: nothing new is recorded (HETRIEVER_ANALYTICS=true "
            "turns it on)"
        )
    say(
        f"{report.queries} queries over the last {report.days:g} days (kept "
        f"{report.retention_days} days), {report.opened} with a result opened ({where})"
    )
    if not report.queries:
        return
    most = max(d["queries"] for d in report.per_day)
    console.print(
        _table(
            "queries per day",
            ("day", "queries", "no result", "weak", ""),
            [
                (d["day"], d["queries"], d["no_result"], d["weak"], _bar(d["queries"], most))
                for d in report.per_day
            ],
        )
    )
    console.print(
        _table(
            "most asked",
            ("query", "times", "no result", "weak"),
            [(q["query"], q["count"], q["no_result"], q["weak"]) for q in report.top_queries],
        )
    )
    if report.no_result:
        console.print(
            _table(
                "found nothing",
                ("query", "times", "last", "repositories"),
                [
                    (q["query"], q["count"], q["last"], ", ".join(q["scope"]))
                    for q in report.no_result
                ],
            )
        )
    if report.weak:
        console.print(
            _table(
                f"found only weak results (nearest similarity under {report.weak_below:g})",
                ("query", "times", "nearest"),
                [(q["query"], q["count"], q["similarity"]) for q in report.weak],
            )
        )
    if report.unopened:
        console.print(
            _table(
                "results nobody opened (HTTP searches)",
                ("query", "times"),
                [(q["query"], q["count"]) for q in report.unopened],
            )
        )
    if report.opens:
        console.print(
            _table(
                "results readers opened",
                ("query", "rank", "url", "times"),
                [(o["query"], o["rank"], o["url"], o["count"]) for o in report.opens],
            )
        )
    console.print(
        _table(
            "latency by source; cold: a process's first search, start-up included",
            ("source", "temperature", "queries", "p50 ms", "p95 ms", "p99 ms"),
            [
                (r["source"], r["temperature"], r["count"], r["p50_ms"], r["p95_ms"], r["p99_ms"])
                for r in report.latency
            ],
        )
    )


def cmd_analytics(args: argparse.Namespace) -> int:
    from hetriever.search.analytics import analytics_path, existing_store
    from hetriever.search.analytics_report import analytics_report

    settings = cli_settings(args)
    where = str(analytics_path(settings.resolved_state_dir).absolute())
    try:
        if args.purge:
            store = existing_store(settings.resolved_state_dir, settings.analytics_retention_days)
            deleted = 0
            if store is not None:
                try:
                    deleted = store.purge()
                finally:
                    store.close()
            if args.json:
                print_json({"purged": deleted, "file": where})
            else:
                make_console().print(
                    f"deleted {deleted} recorded queries and their opens ({where})",
                    markup=False,
                    highlight=False,
                )
            return EXIT_OK
        report = analytics_report(settings, days=args.days)
    except sqlite3.Error as exc:
        raise AnalyticsUnreadable(
            f"cannot read the analytics file {where}: {exc}",
            hint="a server may hold it; retry in a moment",
        ) from None
    if args.json:
        print_json({**report.to_dict(), "file": where})
    else:
        print_report(report, where)
    return EXIT_OK
