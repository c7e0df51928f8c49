"""The garbage collectors as the configuration and the pod managers wire them."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from nodeagent.clock import FrozenClock
from nodeagent.config import Config
from nodeagent.config.units import Duration
from nodeagent.gc import ImageGC, ImageList, PodPresence, gc_managers
from nodeagent.gc.setup import image_gc_policy
from nodeagent.kuberuntime.errors import cri_error
from nodeagent.manager import NullManager
from nodeagent.pods.managers import pod_managers
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.fake_runtime import FakeRuntime


def config(**kubelet: Any) -> Config:
    base = Config()
    return msgspec.structs.replace(base, kubelet=msgspec.structs.replace(base.kubelet, **kubelet))


def collectors(cfg: Config) -> list[object]:
    runtime = FakeRuntime()
    gc = gc_managers(
        cfg,
        runtime=runtime,
        images=runtime,
        pods=PodPresence(synced=lambda: True, api_pods=list, known=lambda _: False),
        clock=FrozenClock(),
        pod_logs_dir="/var/log/pods",
        container_logs_dir="/var/log/containers",
    )
    return [gc.image_list, gc.containers, gc.images]


def test_the_pod_managers_run_the_garbage_collectors_last() -> None:
    pods = pod_managers(
        Config(), api=FakeApiServer(), clock=FrozenClock(), node_name="n1", get_node=lambda: None
    )

    names = [m.name for m in pods.managers]

    assert names[-3:] == ["images", "gc:containers", "gc:images"]


def test_image_gc_follows_the_kubelet_configuration() -> None:
    policy = image_gc_policy(
        config(
            image_gc_high_threshold_percent=90,
            image_gc_low_threshold_percent=70,
            image_minimum_gc_age=Duration.parse("5m"),
            image_maximum_gc_age=Duration.parse("168h"),
        )
    )

    assert (policy.high_threshold_percent, policy.low_threshold_percent) == (90, 70)
    assert (policy.min_age, policy.max_age) == (300.0, 168 * 3600.0)
    assert image_gc_policy(Config()).min_age == 120.0


def test_maximum_age_is_ignored_without_its_feature_gate() -> None:
    cfg = config(
        image_maximum_gc_age=Duration.parse("1h"), feature_gates={"ImageMaximumGCAge": False}
    )
    assert image_gc_policy(cfg).max_age == 0.0


@pytest.mark.parametrize(
    ("kubelet", "enabled"),
    [
        pytest.param({}, True, id="defaults"),
        pytest.param({"image_gc_high_threshold_percent": 100}, False, id="high 100: disabled"),
        pytest.param(
            {
                "image_gc_high_threshold_percent": 100,
                "image_gc_low_threshold_percent": 80,
                "image_maximum_gc_age": Duration.parse("1h"),
            },
            True,
            id="high 100 with a maximum age",
        ),
    ],
)
def test_disabled_image_gc_is_a_null_manager(kubelet: dict[str, Any], enabled: bool) -> None:
    image_gc = collectors(config(**kubelet))[2]
    assert isinstance(image_gc, ImageGC if enabled else NullManager)


def test_pods_exist_while_the_api_or_a_pod_worker_has_them() -> None:
    synced = False
    presence = PodPresence(
        synced=lambda: synced,
        api_pods=lambda: [{"metadata": {"uid": "in-api"}}],
        known=lambda uid: uid == "in-worker",
    )

    assert presence.pod_exists() is None  # before the pods watch has listed
    synced = True
    exists = presence.pod_exists()
    assert exists is not None
    assert [exists(uid) for uid in ("in-api", "in-worker", "gone")] == [True, True, False]


def tags(images: ImageList) -> list[str]:
    return [tag for image in images.images() or [] for tag in image.repo_tags]


@pytest.mark.looptime
async def test_the_image_list_refreshes_every_30s_and_survives_runtime_failures() -> None:
    runtime = FakeRuntime()
    runtime.add_image("docker.io/library/busybox:1.36")
    images = ImageList(images=runtime)
    assert images.images() is None  # not listed yet
    task = asyncio.create_task(images.run())
    try:
        await asyncio.sleep(1)
        assert tags(images) == ["docker.io/library/busybox:1.36"]
        runtime.inject_error(
            "ListImages", cri_error(rpc="ListImages", endpoint="e", code="Unavailable", details="x")
        )
        runtime.add_image("registry.k8s.io/pause:3.10")
        await asyncio.sleep(30)  # the listing at 30s fails: the last one stays
        assert tags(images) == ["docker.io/library/busybox:1.36"]
        await asyncio.sleep(30)
        assert sorted(tags(images)) == [
            "docker.io/library/busybox:1.36",
            "registry.k8s.io/pause:3.10",
        ]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
