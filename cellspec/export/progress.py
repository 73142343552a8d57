"""Progress on stderr for export steps that report none of their own (reading a checkpoint)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

REFRESH_SECONDS = 0.25
DELAY_SECONDS = 0.5  # quicker steps (and quick failures) print nothing


@contextmanager
def stage(description: str, enabled: bool = True) -> Iterator[None]:
    """While the block runs, one stderr line `description: 00:03` counts the seconds (a tqdm bar
    refreshed from a thread, since the work itself has no steps to report). It appears after
    DELAY_SECONDS and is erased when the block raises, leaving the error alone on stderr."""
    if not enabled:
        yield
        return
    started, done = time.time(), threading.Event()
    bars: list[Any] = []  # the bar, once the delay has passed

    def tick() -> None:
        from tqdm import tqdm

        if done.wait(DELAY_SECONDS):
            return
        bar = tqdm(desc=description, bar_format="{desc}: {elapsed}", file=sys.stderr)
        bar.start_t = started  # count from the start of the step, not of the bar
        bars.append(bar)
        while not done.wait(REFRESH_SECONDS):
            bars[0].refresh()

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    is_failed = True
    try:
        yield
        is_failed = False
    finally:
        done.set()
        ticker.join()
        for bar in bars:
            bar.leave = not is_failed
            bar.close()
