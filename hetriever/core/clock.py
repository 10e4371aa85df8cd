"""The one clock: the current moment, and moments as the index writes them down.

Every stamp the index keeps (catalog rows, run reports, publish windows, purge cutoffs, the
model's manifest) is UTC ISO 8601 to the second, so stamps compare as text and a run is judged
against one moment (`now_utc`, which the per-file step and the publish rules share).
"""

from __future__ import annotations

import datetime as dt

__all__ = ["now_iso", "now_utc", "utc_text"]


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def utc_text(moment: dt.datetime | None) -> str:
    """A moment as the index keeps it (a naive one is taken as UTC); "" for none."""
    if moment is None:
        return ""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC).replace(microsecond=0).isoformat()


def now_iso() -> str:
    return utc_text(now_utc())
