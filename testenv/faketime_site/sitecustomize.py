"""Put on PYTHONPATH by `testenv.faketime` only: `time.sleep` that works there.

Python 3.11 sleeps with clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME). libfaketime 0.9.10
(Debian 12) shifts that absolute monotonic deadline even when told to leave the monotonic
clock alone, so every sleep fails with EINVAL (wolfcw/libfaketime#426, fixed upstream later).
select() with no descriptors waits a relative time on the same clock and is left alone; it
resumes after a signal with the time left, as time.sleep does.
"""

from __future__ import annotations

import select
import time
from typing import SupportsIndex


def _sleep(seconds: float | SupportsIndex) -> None:
    delay = float(seconds)
    if delay < 0:
        raise ValueError("sleep length must be non-negative")
    select.select([], [], [], delay)


time.sleep = _sleep
