"""Deliveries that arrived while another process held the catalog's write lock.

The delivery table lives in the catalog, and an ingest holds its write lock for as long as a
write takes (seconds, more on a loaded machine). GitHub waits 10 s for an answer and never
retries a failed delivery by itself, so waiting for the lock, or answering 503, would lose the
push until someone pressed "redeliver" (or the next scheduled run). A delivery that cannot be
claimed within `catalog_timeout` is written here instead, one JSON file per delivery id in
`<state dir>/webhook-queue/` (so a restart keeps it), and answered 202 `queued`; a background
task claims and starts the queued deliveries, oldest first, once the catalog is free. Claiming
still deduplicates them: one queued twice, or already acted on, starts nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

QUEUE_DIR = "webhook-queue"


@dataclass(frozen=True)
class QueuedDelivery:
    delivery: str
    repository: str
    branch: str
    commit: str
    body_digest: str
    received_at: float


class DeliveryQueue:
    """Queued deliveries as files: written whole (to a temporary name, then renamed)."""

    def __init__(self, state_dir: Path) -> None:
        self.directory = state_dir / QUEUE_DIR

    def _path(self, delivery: str) -> Path:
        # The id is the sender's text: named by its digest, never by the text itself.
        return self.directory / f"{hashlib.sha256(delivery.encode()).hexdigest()[:32]}.json"

    def put(self, item: QueuedDelivery) -> None:
        """Keep `item` (the same delivery id again replaces it). Raises OSError when it
        cannot be written (a full disk)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(item.delivery)
        temporary = path.with_suffix(f".tmp-{os.getpid()}")
        try:
            with open(temporary, "w", encoding="utf-8") as out:
                json.dump(asdict(item), out)
                out.flush()
                os.fsync(out.fileno())
            temporary.replace(path)
        except OSError:
            temporary.unlink(missing_ok=True)
            raise

    def items(self) -> list[QueuedDelivery]:
        """What waits, oldest first."""
        if not self.directory.is_dir():
            return []
        found = []
        for path in self.directory.glob("*.json"):
            try:
                found.append(QueuedDelivery(**json.loads(path.read_text(encoding="utf-8"))))
            except (OSError, ValueError, TypeError):
                continue  # unreadable (not ours to delete): its push waits for the schedule
        return sorted(found, key=lambda item: item.received_at)

    def done(self, item: QueuedDelivery) -> None:
        self._path(item.delivery).unlink(missing_ok=True)

    def __len__(self) -> int:
        return len(list(self.directory.glob("*.json"))) if self.directory.is_dir() else 0


def queued_now(
    delivery: str, repository: str, branch: str, commit: str, body_digest: str
) -> QueuedDelivery:
    return QueuedDelivery(delivery, repository, branch, commit, body_digest, time.time())
