"""The node status images list from the runtime's images."""

from __future__ import annotations

from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.nodeimages import node_images


def image(size: int, digests: int = 1, tags: int = 1) -> cri.Image:
    return cri.Image(
        id=f"sha256:{size}",
        size=size,
        repo_digests=[f"r/i{size}@sha256:{n}" for n in range(digests)],
        repo_tags=[f"r/i{size}:t{n}" for n in range(tags)],
    )


def test_largest_first_digests_before_tags_and_capped() -> None:
    images = [image(10), image(30, digests=3, tags=4), image(20)]
    listed = node_images(images, max_images=2)
    assert listed == [
        {
            "names": [
                "r/i30@sha256:0",
                "r/i30@sha256:1",
                "r/i30@sha256:2",
                "r/i30:t0",
                "r/i30:t1",
            ],
            "sizeBytes": 30,
        },
        {"names": ["r/i20@sha256:0", "r/i20:t0"], "sizeBytes": 20},
    ]


def test_minus_one_lists_every_image() -> None:
    assert len(node_images([image(n) for n in range(60)], max_images=-1)) == 60
    assert len(node_images([image(n) for n in range(60)])) == 50
