"""The search analytics report as the Markdown of a Prefect artifact (`search-analytics`).

The same report `hetriever analytics` and `/stats` show. Query text and URLs are data: each
character Markdown or HTML would read as markup is escaped (`md()`), so a query holding
`<script>`, `**` or `|` shows as written and breaks no table.
"""

from __future__ import annotations

import re
from typing import Any

# Markdown's punctuation (CommonMark: any ASCII punctuation may be backslash-escaped).
_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


def md(text: Any) -> str:
    """`text` as literal Markdown: punctuation backslash-escaped, `<` and `&` as entities
    (the renderer passes raw HTML through), one line."""
    value = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    value = _SPECIAL.sub(r"\\\1", value)
    return " ".join(value.split())


def _table(headers: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
    if not rows:
        return ["None.", ""]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += [
        "| " + " | ".join(str(c) if isinstance(c, (int, float)) else md(c) for c in row) + " |"
        for row in rows
    ]
    return [*lines, ""]


def analytics_markdown(report: Any) -> str:
    lines = ["# Search analytics", ""]
    if not report.enabled:
        lines += [
            "Search analytics is off: nothing new is recorded "
            "(`HETRIEVER_ANALYTICS=true` turns it on).",
            "",
        ]
    lines += [
        f"{report.queries} queries over the last {report.days:g} days (kept "
        f"{report.retention_days} days), {report.opened} with a result opened.",
        "",
    ]
    lines += ["## Queries per day", ""] + _table(
        ("day", "queries", "no result", "weak"),
        [(d["day"], d["queries"], d["no_result"], d["weak"]) for d in report.per_day],
    )
    lines += ["## Most asked", ""] + _table(
        ("query", "times", "no result", "weak"),
        [(q["query"], q["count"], q["no_result"], q["weak"]) for q in report.top_queries],
    )
    lines += ["## Found nothing", ""] + _table(
        ("query", "times", "last", "repositories"),
        [(q["query"], q["count"], q["last"], ", ".join(q["scope"])) for q in report.no_result],
    )
    lines += [
        f"## Found only weak results (nearest similarity under {report.weak_below:g})",
        "",
    ] + _table(
        ("query", "times", "nearest"),
        [(q["query"], q["count"], q["similarity"]) for q in report.weak],
    )
    lines += ["## Results nobody opened (HTTP searches)", ""] + _table(
        ("query", "times"), [(q["query"], q["count"]) for q in report.unopened]
    )
    lines += ["## Results readers opened", ""] + _table(
        ("query", "rank", "url", "times"),
        [(o["query"], o["rank"], o["url"], o["count"]) for o in report.opens],
    )
    lines += [
        "## Latency by source (cold: a process's first search, start-up included)",
        "",
    ] + _table(
        ("source", "temperature", "queries", "p50 ms", "p95 ms", "p99 ms"),
        [
            (r["source"], r["temperature"], r["count"], r["p50_ms"], r["p95_ms"], r["p99_ms"])
            for r in report.latency
        ],
    )
    return "\n".join(lines)
