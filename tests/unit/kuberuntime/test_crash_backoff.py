"""The crash-loop back-off: 10s doubling to 300s per key, starting over after 10 clean minutes."""

from __future__ import annotations

from nodeagent.kuberuntime.backoff import Backoff, container_key


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_first_restart_is_immediate_then_10_20_40_up_to_300() -> None:
    clock = Clock()
    backoff = Backoff(now=clock)
    waits = []
    for _ in range(8):
        exited = clock.t  # the container exits now
        wait = backoff.remaining("k", exited)
        waits.append(wait)
        clock.t += wait
        assert backoff.remaining("k", exited) == 0
        backoff.next("k", exited)
    assert waits == [0, 10, 20, 40, 80, 160, 300, 300]


def test_in_backoff_counts_from_the_exit_not_from_the_check() -> None:
    clock = Clock()
    backoff = Backoff(now=clock)
    backoff.next("k", clock.t)  # delay now 10s
    exited = clock.t
    clock.t += 4
    assert backoff.remaining("k", exited) == 6
    clock.t += 6
    assert backoff.remaining("k", exited) == 0


def test_a_container_that_ran_ten_minutes_starts_over_at_ten_seconds() -> None:
    clock = Clock()
    backoff = Backoff(now=clock)
    for _ in range(4):
        backoff.next("k", clock.t)
    assert backoff.get("k") == 80
    clock.t += 601  # ran cleanly for more than 2 x 300s, then exits
    assert backoff.remaining("k", clock.t) == 0
    assert backoff.next("k", clock.t) == 10


def test_keys_are_independent_and_forgotten_per_pod() -> None:
    clock = Clock()
    backoff = Backoff(now=clock)
    a = container_key(namespace="ns", name="p", uid="u1", container="a", hash="h")
    b = container_key(namespace="ns", name="q", uid="u2", container="a", hash="h")
    backoff.next(a, clock.t)
    backoff.next(a, clock.t)
    backoff.next(b, clock.t)
    assert (backoff.get(a), backoff.get(b)) == (20, 10)
    backoff.forget("u1")
    assert (backoff.get(a), backoff.get(b)) == (0, 10)
