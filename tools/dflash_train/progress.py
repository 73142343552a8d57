"""Progress lines on stdout and one JSON log per run folder.

log.json maps a phase ("generate", "train", "eval", ...) to the list of its runs; a run is a
dict of settings and results, and its "events" list holds the periodic progress records.
Every write replaces the whole file atomically, so a killed run leaves the last good log.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any


class RunLog:
    """One run of one phase in `folder/log.json`."""

    def __init__(self, folder: Path, phase: str, settings: dict[str, Any]) -> None:
        self.path = folder / "log.json"
        self.phase = phase
        self.start = time.time()
        self.run: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S"),
                                    "settings": settings, "events": []}
        log = json.loads(self.path.read_text()) if self.path.is_file() else {}
        log.setdefault(phase, []).append(self.run)
        self._log = log
        self.write()

    def event(self, **values: Any) -> None:
        self.run["events"].append({"seconds": round(time.time() - self.start, 2), **values})
        self.write()

    def finish(self, **results: Any) -> None:
        self.run["seconds"] = round(time.time() - self.start, 2)
        self.run.update(results)
        self.write()

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name("log.json.tmp")
        tmp.write_text(json.dumps(self._log, indent=1, default=_plain))
        tmp.replace(self.path)


class Progress:
    """Rate and ETA of a phase that ends at `total` units or at a time budget, whichever
    comes first; `due()` is true at most every `every` seconds."""

    def __init__(self, total: float, budget_seconds: float | None, every: float = 10.0) -> None:
        self.total, self.budget, self.every = total, budget_seconds, every
        self.start = self.last = time.time()

    def elapsed(self) -> float:
        return time.time() - self.start

    def due(self) -> bool:
        if time.time() - self.last < self.every:
            return False
        self.last = time.time()
        return True

    def eta(self, done: float) -> float:
        """Seconds left: the work left at the rate so far, capped by the budget left."""
        elapsed = self.elapsed()
        by_work = (self.total - done) * elapsed / done if done > 0 else math.inf
        by_budget = self.budget - elapsed if self.budget else math.inf
        return max(0.0, min(by_work, by_budget))


def say(phase: str, message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {phase}: {message}", flush=True)


def _plain(value: Any) -> Any:
    """numpy scalars and arrays as JSON numbers and lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
