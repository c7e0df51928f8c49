"""``kubelet_image_garbage_collected_total`` on the default Prometheus registry: each image the
image garbage collector removed, by why (``age``: unused longer than ``imageMaximumGCAge``;
``space``: to bring the image filesystem under its low threshold)."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter

IMAGES_COLLECTED: Final = Counter(
    "kubelet_image_garbage_collected_total",
    "Total number of images garbage collected by the kubelet, whether through disk usage or "
    "image age.",
    ["reason"],
)
