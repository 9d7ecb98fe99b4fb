"""`analysis/memo.py`: a result computed once per key, the key holding the version of what it was computed from."""

from __future__ import annotations

import gc

import pytest

from amber_pipeline.analysis.memo import Memo


def test_a_result_is_computed_once_per_key_and_the_oldest_is_dropped() -> None:
    made: list[str] = []
    memo: Memo[str] = Memo(2)

    def compute(key: str) -> str:
        made.append(key)
        return key.upper()

    assert [memo.get(k, lambda k=k: compute(k)) for k in ("a", "a", "b", "a", "c", "b")] == list("AABACB")
    assert made == ["a", "b", "c", "b"]  # "b" was the least recently used when "c" came


def test_a_refusal_is_said_every_time_never_kept() -> None:
    memo: Memo[int] = Memo(4)
    asked = 0

    def refuse() -> int:
        nonlocal asked
        asked += 1
        raise ValueError("no")

    for _ in range(2):
        with pytest.raises(ValueError):
            memo.get("k", refuse)
    assert asked == 2


def test_a_server_moves_what_it_keeps_out_of_the_collectors_sight(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Memo, "freeze_kept", True)
    try:
        kept = Memo[list[int]](1).get("k", lambda: list(range(10)))
        assert gc.get_freeze_count() > 0 and kept == list(range(10))
    finally:
        gc.unfreeze()
