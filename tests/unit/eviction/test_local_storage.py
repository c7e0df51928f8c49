"""Local ephemeral storage isolation, pure: which pod is over which limit, with the kubelet's
messages and quantities as ``Quantity.String()`` writes them."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.eviction import localstorage
from nodeagent.eviction.localstorage import ContainerStorage, PodStorage
from nodeagent.quantity import canonical, parse_quantity, quantity_format
from nodeagent.testing.pods import container, pod

Mi = 2**20


def writer(name: str = "app", limit: str | None = None) -> dict[str, Any]:
    return container(name, limits={"ephemeral-storage": limit} if limit else None)


def empty_dir(name: str, size: str | None = None, medium: str = "") -> dict[str, Any]:
    source: dict[str, Any] = {"medium": medium} if medium else {}
    if size is not None:
        source["sizeLimit"] = size
    return {"name": name, "emptyDir": source}


def usage(
    total: int = 0, volumes: dict[str, int] | None = None, **containers: tuple[int, int]
) -> PodStorage:
    return PodStorage(
        containers={n: ContainerStorage(rootfs=r, logs=lg) for n, (r, lg) in containers.items()},
        volumes=volumes or {},
        total=total,
    )


def test_the_summary_gives_each_pods_containers_volumes_and_total() -> None:
    summary = {
        "pods": [
            {
                "podRef": {"uid": "u1"},
                "containers": [
                    {"name": "app", "rootfs": {"usedBytes": 3 * Mi}, "logs": {"usedBytes": 4096}},
                    {"name": "idle"},
                ],
                "volume": [{"name": "scratch", "usedBytes": 2 * Mi}, {"name": "odd"}],
                "ephemeral-storage": {"usedBytes": 5 * Mi + 8192},
            },
            {"podRef": {"uid": "u2"}},
        ]
    }
    got = localstorage.storage_usage(summary)
    assert got["u1"] == PodStorage(
        containers={
            "app": ContainerStorage(rootfs=3 * Mi, logs=4096),
            "idle": ContainerStorage(),
        },
        volumes={"scratch": 2 * Mi},
        total=5 * Mi + 8192,
    )
    assert got["u2"] == PodStorage()


@pytest.mark.parametrize(
    ("spec", "used", "message"),
    [
        pytest.param(
            {"containers": [writer(limit="5Mi")]},
            usage(total=10 * Mi + 4096, app=(10 * Mi, 0)),
            "Pod ephemeral local storage usage exceeds the total limit of containers 5Mi. ",
            id="the e2e spec's pod: one container over 5Mi is over the pod's total first",
        ),
        pytest.param(
            {"containers": [writer("app", "1Mi"), writer("idle", "20Mi")]},
            usage(total=4 * Mi, app=(4 * Mi - 4096, 4096), idle=(0, 0)),
            'Container app exceeded its local ephemeral storage limit "1Mi". ',
            id="a container over its own limit, the pod within the sum",
        ),
        pytest.param(
            {"containers": [writer()], "volumes": [empty_dir("scratch", "1Mi")]},
            usage(total=4 * Mi, volumes={"scratch": 4 * Mi}),
            'Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". ',
            id="an emptyDir over its sizeLimit, no container limit",
        ),
        pytest.param(
            {"containers": [writer(limit="1Mi")], "volumes": [empty_dir("scratch", "1Mi")]},
            usage(total=9 * Mi, volumes={"scratch": 4 * Mi}, app=(5 * Mi, 0)),
            'Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". ',
            id="the emptyDir is checked first, then the pod, then the containers",
        ),
        pytest.param(
            {"containers": [writer("a", "1Mi"), writer("b", "500Ki")]},
            usage(total=2 * Mi),
            "Pod ephemeral local storage usage exceeds the total limit of containers 1524Ki. ",
            id="the total is written in the first limit's format",
        ),
        pytest.param(
            {"containers": [writer("a", "1000000"), writer("b", "1Mi")]},
            usage(total=3 * Mi),
            "Pod ephemeral local storage usage exceeds the total limit of containers 2048576. ",
            id="a decimal first limit makes a decimal total",
        ),
        pytest.param(
            {"containers": [writer("app", "1.5Mi")]},
            usage(total=Mi, app=(Mi, Mi)),
            'Container app exceeded its local ephemeral storage limit "1536Ki". ',
            id="a container's logs count with its writable layer",
        ),
    ],
)
def test_the_first_limit_over_gives_the_kubelets_message(
    spec: dict[str, Any], used: PodStorage, message: str
) -> None:
    assert localstorage.violation(pod(**spec), used, dedicated_image_fs=False) == message


@pytest.mark.parametrize(
    ("spec", "used"),
    [
        pytest.param(
            {"containers": [writer(limit="20Mi")]},
            usage(total=Mi, app=(Mi, 0)),
            id="within its limits",
        ),
        pytest.param({"containers": [writer()]}, usage(total=50 * Mi), id="no limit at all"),
        pytest.param(
            {"containers": [writer()], "volumes": [empty_dir("scratch", "0")]},
            usage(total=4 * Mi, volumes={"scratch": 4 * Mi}),
            id="a zero sizeLimit is no limit",
        ),
        pytest.param(
            {"containers": [writer()], "volumes": [empty_dir("scratch")]},
            usage(total=4 * Mi, volumes={"scratch": 4 * Mi}),
            id="an emptyDir without sizeLimit",
        ),
        pytest.param(
            {"containers": [writer(limit="1Mi")], "volumes": [empty_dir("scratch", "1Mi")]},
            usage(total=Mi),
            id="exactly at the limits",
        ),
    ],
)
def test_a_pod_within_its_limits_stays(spec: dict[str, Any], used: PodStorage) -> None:
    assert localstorage.violation(pod(**spec), used, dedicated_image_fs=False) is None


def test_with_a_dedicated_image_fs_only_the_logs_count_against_a_containers_limit() -> None:
    p = pod(containers=[writer("app", "1Mi"), writer("idle", "100Mi")])
    used = usage(total=5 * Mi, app=(5 * Mi, 4096))
    assert localstorage.violation(p, used, dedicated_image_fs=True) is None
    over = usage(total=5 * Mi, app=(0, 2 * Mi))
    assert localstorage.violation(p, over, dedicated_image_fs=True) == (
        'Container app exceeded its local ephemeral storage limit "1Mi". '
    )


@pytest.mark.parametrize(
    ("spec", "limit"),
    [
        pytest.param({"containers": [writer("a", "1Mi"), writer("b")]}, "1Mi", id="one of two"),
        pytest.param(
            {
                "containers": [writer("a", "1Mi")],
                "initContainers": [
                    {**writer("side", "2Mi"), "restartPolicy": "Always"},
                    writer("init", "2Mi"),
                ],
            },
            "4Mi",
            id="a sidecar adds; an init container needs itself plus the sidecars before it",
        ),
        pytest.param(
            {"containers": [writer("a", "1Mi")], "initContainers": [writer("init", "8Mi")]},
            "8Mi",
            id="a larger init container sets the limit",
        ),
        pytest.param(
            {"containers": [writer("a", "1Mi")], "overhead": {"ephemeral-storage": "1Mi"}},
            "2Mi",
            id="the overhead adds to a limit",
        ),
        pytest.param(
            {"containers": [writer("a")], "overhead": {"ephemeral-storage": "1Mi"}},
            None,
            id="but makes none",
        ),
    ],
)
def test_the_pods_limit_is_podlimits(spec: dict[str, Any], limit: str | None) -> None:
    got = localstorage.pod_limit(pod(**spec))
    assert (str(got) if got is not None else None) == limit


def test_violations_skip_pods_without_stats_and_keep_the_order() -> None:
    a = pod("a", containers=[writer(limit="1Mi")])
    b = pod("b", containers=[writer(limit="1Mi")])
    c = pod("c", containers=[writer(limit="1Mi")])
    used = {a.uid: usage(total=2 * Mi), c.uid: usage(total=3 * Mi)}
    found = localstorage.violations([a, b, c], used, dedicated_image_fs=False)
    assert [(p.name, m) for p, m in found] == [
        ("a", "Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. "),
        ("c", "Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. "),
    ]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("5Mi", "5Mi"),
        ("1.5Mi", "1536Ki"),
        ("1000000", "1M"),
        ("5M", "5M"),
        ("1500", "1500"),
        ("5e6", "5e6"),
        ("500m", "500m"),
        ("1000Ki", "1000Ki"),
        ("0", "0"),
    ],
)
def test_quantities_are_written_as_go_writes_them(text: str, shown: str) -> None:
    assert canonical(parse_quantity(text), quantity_format(text)) == shown
