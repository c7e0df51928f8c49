"""The storage selection: which feature tags are skipped, which images the suite names."""

from __future__ import annotations

import re
from pathlib import Path

from conformance import storage


def test_skip_lists_every_feature_but_the_allowed_ones() -> None:
    names = {
        "[sig-storage] CSI Volumes [Driver: csi-hostpath] x [Feature:VolumeSnapshotDataSource] y",
        "[sig-storage] CSI Volumes [Driver: csi-hostpath] x [Feature:VolumeAttributesClass] y",
        "[sig-storage] In-tree Volumes [Driver: local] x [Feature:Windows] y",
        "[sig-storage] In-tree Volumes [Driver: local] x y",
    }
    skip = storage.skip_for(names)
    assert skip.startswith(storage.BASE_SKIP)
    kept = [n for n in names if not re.search(skip, n)]
    assert sorted(kept) == sorted(
        n for n in names if "Feature:" not in n or "VolumeAttributesClass" in n
    )
    assert storage.skip_for({"[sig-storage] no tags"}) == storage.BASE_SKIP


def test_block_patterns_are_selected_for_both_drivers() -> None:
    skip = re.compile(storage.skip_for(set()))
    csi = "[sig-storage] CSI Volumes [Driver: csi-hostpath] [Testpattern: Dynamic PV "
    assert not skip.search(csi + "(block volmode)(allowExpansion)] volume-expand x")
    assert not skip.search(csi + "(block volmode)] volumes should store data")
    assert not skip.search(csi + "(default fs)] volumes should store data")
    local = "[sig-storage] In-tree Volumes [Driver: local][LocalVolumeType: block] "
    assert not skip.search(local + "[Testpattern: Pre-provisioned PV (block volmode)] volumes x")


def test_focus_picks_the_drivers_and_local_pvs() -> None:
    focus = re.compile(storage.FOCUS)
    suite = "Kubernetes e2e suite "
    wanted = [
        "[sig-storage] CSI Volumes [Driver: csi-hostpath] [Testpattern: Dynamic PV] volumes x",
        "[sig-storage] In-tree Volumes [Driver: hostPath] [Testpattern: Inline] volumes x",
        "[sig-storage] In-tree Volumes [Driver: hostPathSymlink] [Testpattern: Inline] x",
        "[sig-storage] In-tree Volumes [Driver: local][LocalVolumeType: dir] x",
        "[sig-storage] PersistentVolumes-local [Volume type: dir] One pod x",
    ]
    unwanted = [
        "[sig-storage] In-tree Volumes [Driver: nfs] x",
        "[sig-storage] CSI Mock volume attach x",
        "[sig-storage] In-tree Volumes [Driver: emptydir] x",
    ]
    assert all(focus.search(suite + n) for n in wanted)
    assert not any(focus.search(suite + n) for n in unwanted)


def test_suite_images_read_from_the_hostpath_manifest(tmp_path: Path) -> None:
    manifest = tmp_path / storage.HOSTPATH_MANIFEST
    manifest.parent.mkdir(parents=True)
    manifest.write_text(
        "      containers:\n"
        "        - name: hostpath\n"
        "          image: registry.k8s.io/sig-storage/hostpathplugin:v1.17.1\n"
        "        - name: csi-provisioner\n"
        "          image: registry.k8s.io/sig-storage/csi-provisioner:v6.1.1\n"
        "          # image: registry.k8s.io/sig-storage/commented:v1\n"
    )
    assert storage.suite_images(tmp_path) == {
        "hostpathplugin": "v1.17.1",
        "csi-provisioner": "v6.1.1",
    }
