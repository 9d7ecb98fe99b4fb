"""What was computed from a Job's stored Trials, kept in this process while those files stay as they were.

A report (its bootstrap among it), a Task matrix and a cell's evidence are functions of the stored Trial files
and a few small arguments. A page or an API client asking again for an unchanged Job gets the same result
without computing it again; a Trial stored since changes the file's size and time, which are part of the key,
so nothing stale is served. Errors are not kept: a refusal is computed (and said) every time.
"""

from __future__ import annotations

import gc
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable


class Memo[T]:
    """The latest `size` results by key, the least recently used dropped first.

    `freeze_kept`, set by a long-running server: a result kept here lives for many requests, and a full collection
    of the cyclic garbage collector walks every object alive, so a kept 5,000-Trial report made every such
    collection a 100 ms pause (the web pages' slowest loads). Each new result is then moved out of the collector's
    sight (`gc.freeze`, with whatever else is alive: the imports, mostly); reference counting still frees it when it
    is dropped, since nothing kept here holds a cycle."""

    freeze_kept = False

    def __init__(self, size: int) -> None:
        self.size = size
        self._kept: OrderedDict[Hashable, T] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key]
        made = compute()  # outside the lock: two first asks may both compute, and keep the same result
        with self._lock:
            self._kept[key] = made
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)
        if Memo.freeze_kept:
            gc.freeze()
        return made
