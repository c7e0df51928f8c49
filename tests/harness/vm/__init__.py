"""The VM system-test tier: a Debian 12 guest under qemu (TCG) with the project's .deb installed.

- :mod:`image`: the base image (debootstrap + ``mkfs.ext4 -d``), cached by recipe hash;
- :mod:`machine`: one running VM on a qcow2 overlay, with ``run``/``put``/``get``;
- :mod:`control` / :mod:`guest_agent`: the virtio-serial control channel, host and guest halves;
- :mod:`qemu`: the qemu command line; :mod:`relay`: the guestfwd to the host's apiserver;
- ``provision.sh``: the install path (also the Vagrantfile's provisioner).

Why these choices, and the measured times: ``README.md`` in this directory.
"""

from __future__ import annotations

from harness.vm.control import VmError, VmTimeout
from harness.vm.image import Image, Recipe, deb_depends, ensure_image, recipe_for
from harness.vm.machine import GuestCommandFailed, Machine, RunResult

__all__ = [
    "GuestCommandFailed",
    "Image",
    "Machine",
    "Recipe",
    "RunResult",
    "VmError",
    "VmTimeout",
    "deb_depends",
    "ensure_image",
    "recipe_for",
]
