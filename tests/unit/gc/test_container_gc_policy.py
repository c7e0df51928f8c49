"""Which dead containers, sandboxes and log directories container GC picks (pure)."""

from __future__ import annotations

import pytest

from nodeagent.gc.policy import (
    ContainerGCPolicy,
    DeadContainer,
    RuntimeContainer,
    Sandbox,
    container_id_of_log_symlink,
    containers_to_remove,
    evictable_containers,
    log_dirs_to_remove,
    sandboxes_to_remove,
)

S = 1_000_000_000  # nanoseconds per second


def dead(cid: str, *, uid: str = "u1", name: str = "app", at: int = 0) -> DeadContainer:
    return DeadContainer(id=cid, pod_uid=uid, name=name, created_at=at * S)


def ids(containers: list[DeadContainer]) -> list[str]:
    return [c.id for c in containers]


def nothing_removable(_uid: str) -> bool:
    return False


def test_running_and_young_containers_are_not_evictable() -> None:
    listed = [
        RuntimeContainer(
            id="run", pod_uid="u", name="a", sandbox_id="s", created_at=0, running=True
        ),
        RuntimeContainer(
            id="old", pod_uid="u", name="a", sandbox_id="s", created_at=10 * S, running=False
        ),
        RuntimeContainer(
            id="young", pod_uid="u", name="a", sandbox_id="s", created_at=95 * S, running=False
        ),
    ]

    evictable = evictable_containers(listed, now_ns=100 * S, min_age=10)

    assert ids(evictable) == ["old"]


def test_zero_min_age_makes_every_stopped_container_evictable() -> None:
    listed = [
        RuntimeContainer(
            id="now", pod_uid="u", name="a", sandbox_id="s", created_at=100 * S, running=False
        )
    ]
    assert ids(evictable_containers(listed, now_ns=100 * S, min_age=0)) == ["now"]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        pytest.param(
            ContainerGCPolicy(), ["c1", "c2"], id="default keeps the newest per container"
        ),
        pytest.param(
            ContainerGCPolicy(max_per_pod_container=2), ["c1"], id="two kept per container"
        ),
        pytest.param(
            ContainerGCPolicy(max_per_pod_container=0), ["c1", "c2", "c3"], id="none kept"
        ),
        pytest.param(ContainerGCPolicy(max_per_pod_container=-1), [], id="no per-container limit"),
    ],
)
def test_max_per_pod_container_removes_the_oldest_first(
    policy: ContainerGCPolicy, expected: list[str]
) -> None:
    containers = [dead("c3", at=30), dead("c1", at=10), dead("c2", at=20)]

    assert ids(containers_to_remove(containers, policy=policy, removable=nothing_removable)) == (
        expected
    )


def test_evict_units_are_per_pod_and_container_name() -> None:
    containers = [
        dead("a-old", name="a", at=1),
        dead("a-new", name="a", at=2),
        dead("b-only", name="b", at=1),
        dead("other-pod", uid="u2", name="a", at=0),
    ]

    removed = containers_to_remove(
        containers, policy=ContainerGCPolicy(), removable=nothing_removable
    )

    assert ids(removed) == ["a-old"]


def test_every_dead_container_of_a_pod_that_is_gone_is_removed() -> None:
    containers = [dead("gone-1", uid="gone", at=1), dead("gone-2", uid="gone", at=2)]
    containers += [dead("kept", uid="here", at=3)]

    removed = containers_to_remove(
        containers, policy=ContainerGCPolicy(), removable=lambda uid: uid == "gone"
    )

    assert ids(removed) == ["gone-1", "gone-2"]


@pytest.mark.parametrize(
    ("max_containers", "expected"),
    [
        pytest.param(-1, [], id="no global cap"),
        pytest.param(3, [], id="under the cap"),
        pytest.param(2, ["a1"], id="cap leaves one per unit, then the oldest of all go"),
        pytest.param(1, ["a1", "b1"], id="cap below the number of units removes the oldest"),
        pytest.param(0, ["a1", "b1", "c1"], id="zero removes every one"),
    ],
)
def test_max_containers_caps_dead_containers_on_the_node(
    max_containers: int, expected: list[str]
) -> None:
    containers = [dead("a1", name="a", at=1), dead("b1", name="b", at=2)]
    containers += [dead("c1", name="c", at=3)]
    policy = ContainerGCPolicy(max_per_pod_container=-1, max_containers=max_containers)

    removed = containers_to_remove(containers, policy=policy, removable=nothing_removable)

    assert sorted(ids(removed)) == sorted(expected)


def test_max_containers_first_evens_out_the_units() -> None:
    # 4 dead of "a", 1 of "b"; cap 2 -> 1 per unit: a's three oldest go, b stays.
    containers = [dead(f"a{i}", name="a", at=i) for i in range(1, 5)] + [dead("b", name="b", at=0)]
    policy = ContainerGCPolicy(max_per_pod_container=-1, max_containers=2)

    removed = containers_to_remove(containers, policy=policy, removable=nothing_removable)

    assert ids(removed) == ["a1", "a2", "a3"]


def sandbox(sid: str, *, uid: str = "u1", at: int = 0, ready: bool = False) -> Sandbox:
    return Sandbox(id=sid, pod_uid=uid, created_at=at * S, ready=ready)


@pytest.mark.parametrize(
    ("sandboxes", "in_use", "gone", "expected"),
    [
        pytest.param(
            [sandbox("s1", at=1), sandbox("s2", at=2), sandbox("s3", at=3)],
            set(),
            False,
            ["s1", "s2"],
            id="existing pod keeps its newest sandbox",
        ),
        pytest.param(
            [sandbox("s1", at=1), sandbox("s2", at=2)],
            set(),
            True,
            ["s1", "s2"],
            id="pod gone: every inactive sandbox goes",
        ),
        pytest.param(
            [sandbox("s1", at=1, ready=True), sandbox("s2", at=2)],
            set(),
            True,
            ["s2"],
            id="a ready sandbox is never removed",
        ),
        pytest.param(
            [sandbox("s1", at=1), sandbox("s2", at=2)],
            {"s1"},
            True,
            ["s2"],
            id="a sandbox that still holds a container is never removed",
        ),
        pytest.param(
            [sandbox("s1", at=1, ready=True), sandbox("s2", at=2)],
            set(),
            False,
            [],
            id="existing pod: an old ready sandbox stays, the newest dead one too",
        ),
    ],
)
def test_inactive_sandboxes_are_removed_unless_newest_of_an_existing_pod(
    sandboxes: list[Sandbox], in_use: set[str], gone: bool, expected: list[str]
) -> None:
    removed = sandboxes_to_remove(sandboxes, in_use=in_use, removable=lambda _uid: gone)

    assert [s.id for s in removed] == expected


def test_log_directories_of_pods_that_are_gone_are_removed() -> None:
    names = ["default_web-0_u1", "kube-system_dns_abc_u2", "default_db-0_u3"]

    removed = log_dirs_to_remove(names, removable=lambda uid: uid in {"u2", "u3"})

    assert removed == ["default_db-0_u3", "kube-system_dns_abc_u2"]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("web_default_app-" + "a" * 64 + ".log", "a" * 64, id="legacy symlink"),
        pytest.param("web_default_my-app-abc.log", "abc", id="dashes in the container name"),
        pytest.param("notes.txt", None, id="not a log"),
        pytest.param("web_default_app-.log", None, id="no id"),
    ],
)
def test_container_id_is_read_from_a_legacy_log_symlink(name: str, expected: str | None) -> None:
    assert container_id_of_log_symlink(name) == expected
