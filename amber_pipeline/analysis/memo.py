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
        self._computing: dict[Hashable, threading.Event] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        """The kept result of ``key``, else ``compute()``'s, kept. One caller computes a key at a time (outside the
        lock); others asking for it meanwhile wait for that result rather than compute it again each, which on a
        server's first requests for a Job made twenty bootstraps contend for one interpreter. If it fails, the
        next waiter computes it in turn: errors are not kept."""
        while True:
            with self._lock:
                if key in self._kept:
                    self._kept.move_to_end(key)
                    return self._kept[key]
                underway = self._computing.get(key)
                if underway is None:
                    underway = self._computing[key] = threading.Event()
                    break
            underway.wait()
        try:
            made = compute()
            with self._lock:
                self._kept[key] = made
                while len(self._kept) > self.size:
                    self._kept.popitem(last=False)
        finally:
            with self._lock:
                del self._computing[key]
            underway.set()
        if Memo.freeze_kept:
            gc.freeze()
        return made
