"""The garbage collectors for a configuration, as :func:`nodeagent.pods.pod_managers` wires
them: container GC (every 1m), image GC (every 5m; a null manager when disabled) and the image
list the node status reads (every 30s)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nodeagent.clock import Clock
from nodeagent.config import Config
from nodeagent.config.features import effective
from nodeagent.events import DiscardEvents, EventSink
from nodeagent.gc.containers import ContainerGC
from nodeagent.gc.imagelist import ImageList
from nodeagent.gc.imagepolicy import ImageGCPolicy
from nodeagent.gc.images import ImageGC, PostGcHook
from nodeagent.gc.podstate import PodsView
from nodeagent.kuberuntime.service import ImageService, RuntimeService
from nodeagent.log import get_logger
from nodeagent.manager import Manager, NullManager


def image_gc_policy(config: Config) -> ImageGCPolicy:
    k = config.kubelet
    max_age = k.image_maximum_gc_age.nanoseconds / 1e9
    return ImageGCPolicy(
        high_threshold_percent=k.image_gc_high_threshold_percent,
        low_threshold_percent=k.image_gc_low_threshold_percent,
        min_age=k.image_minimum_gc_age.nanoseconds / 1e9,
        max_age=max_age if effective(k.feature_gates)["ImageMaximumGCAge"] else 0.0,
    )


@dataclass(frozen=True)
class GarbageCollectors:
    containers: ContainerGC
    images: Manager
    image_list: ImageList

    @property
    def managers(self) -> list[Manager]:
        return [self.image_list, self.containers, self.images]


def gc_managers(
    config: Config,
    *,
    runtime: RuntimeService,
    images: ImageService,
    pods: PodsView,
    clock: Clock,
    pod_logs_dir: str,
    container_logs_dir: str,
    events: EventSink | None = None,
    post_image_gc: Sequence[PostGcHook] = (),
) -> GarbageCollectors:
    """``post_image_gc``: told after each image GC pass which images are still on the node
    (the pull records' pruning)."""
    sink = events or DiscardEvents()
    policy = image_gc_policy(config)
    image_gc: Manager
    if policy.enabled:
        image_gc = ImageGC(
            images=images,
            runtime=runtime,
            clock=clock,
            events=sink,
            policy=policy,
            post_gc=post_image_gc,
        )
    else:
        get_logger("gc.images").v(2).info(
            "ImageGCHighThresholdPercent is set 100 and ImageMaximumGCAge is 0, Disable image GC"
        )
        image_gc = NullManager(name="gc:images")
    return GarbageCollectors(
        containers=ContainerGC(
            runtime=runtime,
            pods=pods,
            clock=clock,
            events=sink,
            pod_logs_dir=pod_logs_dir,
            container_logs_dir=container_logs_dir,
        ),
        images=image_gc,
        image_list=ImageList(images=images),
    )
