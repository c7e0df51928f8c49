"""The images the selected e2e specs run, made on this machine, and the registry list for them.

The e2e suite names its images in ``test/utils/image/manifest.go`` (k8s.io/kubernetes at
KUBERNETES_VERSION); ``KUBE_TEST_REPO_LIST`` (a YAML of registry overrides, written by
`repo_list`) points every registry it knows at ``make up``'s local registry, under which
`push_all` pushes:

| e2e name (registry part replaced)     | made here from                                          |
|---------------------------------------|---------------------------------------------------------|
| ``e2e-test-images/agnhost:2.63.0``    | the agnhost binary built from the module, on the static |
| (and AgnhostPrev ``2.55``)            | busybox (its shell and applets), ``/uploads``, porter's |
|                                       | localhost cert, the image's uid 1000 / gid 50000;       |
|                                       | ENTRYPOINT /agnhost, CMD pause (as its Dockerfile);     |
|                                       | ``nc``: tests/conformance/nc (busybox's lacks -v/-t/-u) |
|                                       | ``curl``, ``dig``, ``getent``, ``wget``: the            |
|                                       | ``*-standin.sh`` scripts over busybox wget / nslookup;  |
|                                       | ``/bin/sh``: Debian's dynamic busybox (see `path_sh`),  |
|                                       | ``/bin/bash``: the host's (see `bash`)                  |
| ``e2e-test-images/glibc-dns-testing`` | busybox with the ``dig`` and ``getent`` stand-ins       |
| ``:2.0.0``                            | (``+tcp`` queries go over UDP: busybox has no DNS TCP)  |
| ``e2e-test-images/busybox:1.37.0-1``  | the harness's busybox (Debian's static busybox 1.35),   |
|                                       | every applet also in /bin as upstream's image           |
| ``pause:3.10.2``                      | the harness's pause image (pause.c)                     |
| ``e2e-test-images/nginx:1.15-4``,     | busybox ``httpd -f -p 80`` serving /usr/share/nginx/html |
| ``nginx:1.27-0``                      | (a stand-in: an HTTP server on :80, not nginx)          |
| ``e2e-test-images/nonroot:1.5``       | busybox with USER 1234 (as its Dockerfile)              |
| ``e2e-test-images/kitten:1.8``,       | agnhost plus the module's html files, CMD               |
| ``nautilus:1.8``                      | test-webserver (as their Dockerfiles)                   |
| ``library/busybox:latest``            | busybox (``docker.io/library`` is mapped here too)      |

Not made here (a spec that needs one fails at the pull with ErrImagePull and is reported as
"image not available here"): nonewprivs, ipc-utils, the node-perf, volume and sample-apiserver
images, etcd, perl, resource-consumer, apparmor-loader, distroless-iptables,
regression-issue-74839.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from harness import registry as reg
from harness.images import build as image_build
from harness.images import oci
from harness.images.recipes import PATH_ENV, _busybox_entries
from harness.versions import cache_dir

AGNHOST_PASSWD = b"user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n"
AGNHOST_GROUP = (
    b"user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n"
)
STANDINS = {"usr/bin/curl": "curl-standin.sh", "usr/bin/dig": "dig-standin.sh"}
STANDINS["usr/bin/getent"] = "getent-standin.sh"
STANDINS["usr/bin/wget"] = "wget-standin.sh"  # busybox's, without the -T that crashes it
NGINX_HTML = b"<html><body><h1>Welcome to nginx!</h1></body></html>\n"


@dataclass(frozen=True, slots=True)
class Made:
    """One image to push: its OCI layout and the references it goes under (no registry)."""

    layout: Path
    references: tuple[str, ...]


def repo_list(registry_host: str) -> str:
    """The KUBE_TEST_REPO_LIST YAML: every registry the suite knows, at the local registry.
    The invalid registry stays invalid (specs expect its pull to fail)."""
    fields = {
        "promoterE2eRegistry": "e2e-test-images",
        "buildImageRegistry": "build-image",
        "gcEtcdRegistry": "",
        "gcRegistry": "",
        "sigStorageRegistry": "sig-storage",
        "privateRegistry": "k8s-authenticated-test",
        "dockerLibraryRegistry": "library",
        "cloudProviderGcpRegistry": "cloud-provider-gcp",
    }
    lines = [f"{key}: {registry_host}/{path}".rstrip("/") for key, path in fields.items()]
    lines.append("invalidRegistry: invalid.registry.k8s.io/invalid")
    return "\n".join(lines) + "\n"


def _replace_files(entries: Iterable[oci.Entry], files: dict[str, bytes]) -> list[oci.Entry]:
    """`entries` with the files in `files` appended to (etc/passwd) or added."""
    out = []
    for entry in entries:
        if entry.path in files:
            out.append(dataclasses.replace(entry, data=entry.data + files[entry.path]))
        else:
            out.append(entry)
    have = {e.path for e in out}
    out += [
        oci.Entry(path=p, kind="file", mode=0o644, data=d)
        for p, d in files.items()
        if p not in have
    ]
    return out


def overlay(base: Iterable[oci.Entry], top: Iterable[oci.Entry]) -> list[oci.Entry]:
    """`base` with `top` on it: an entry of `top` replaces the one at the same path."""
    top = list(top)
    paths = {e.path for e in top}
    return [*(e for e in base if e.path not in paths), *top]


def agnhost_entries(
    agnhost: Path, nc: Path, module: Path, *, extra: Iterable[oci.Entry] = ()
) -> list[oci.Entry]:
    porter = module / "test" / "images" / "agnhost" / "porter"
    entries = _replace_files(
        e2e_busybox(),
        {"etc/passwd": AGNHOST_PASSWD, "etc/group": AGNHOST_GROUP},
    )
    top = [
        oci.Entry(path="agnhost", kind="file", mode=0o755, data=agnhost.read_bytes()),
        oci.Entry(path="agnhost-2", kind="symlink", target="agnhost"),
        oci.Entry(path="usr/bin/nc", kind="file", mode=0o755, data=nc.read_bytes()),
        *standins(),
        *path_sh(),
        *bash(),
        oci.Entry(path="uploads", kind="dir", mode=0o755),
        oci.Entry(
            path="localhost.crt",
            kind="file",
            mode=0o644,
            data=(porter / "localhost.crt").read_bytes(),
        ),
        oci.Entry(
            path="localhost.key",
            kind="file",
            mode=0o644,
            data=(porter / "localhost.key").read_bytes(),
        ),
        *extra,
    ]
    return overlay(entries, top)


# The dynamic busybox's shared libraries, as the image's loader looks for them.
SH_LIBS = {
    "lib64/ld-linux-x86-64.so.2": "/lib64/ld-linux-x86-64.so.2",
    "lib/x86_64-linux-gnu/libc.so.6": "/lib/x86_64-linux-gnu/libc.so.6",
    "lib/x86_64-linux-gnu/libresolv.so.2": "/lib/x86_64-linux-gnu/libresolv.so.2",
}


def dynamic_busybox() -> Path:
    """Debian's dynamically linked busybox (package ``busybox``; it conflicts with the
    ``busybox-static`` the harness uses, so it is downloaded and unpacked, not installed),
    cached under ``~/.cache/nodeagent/conformance/busybox-dynamic``."""
    root = cache_dir() / "conformance" / "busybox-dynamic"
    binary = root / "bin" / "busybox"
    if binary.exists():
        return binary
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["apt-get", "download", "-q", "busybox"], cwd=tmp, check=True)
        (deb,) = Path(tmp).glob("busybox_*.deb")
        unpacked = Path(tmp) / "x"
        subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
        binary.parent.mkdir(parents=True, exist_ok=True)
        staged = root / "busybox.tmp"
        shutil.copyfile(unpacked / "bin" / "busybox", staged)
        os.replace(staged, binary)
    return binary


def path_sh() -> list[oci.Entry]:
    """``/bin/sh`` that finds commands on ``PATH``: Debian's static busybox is built as a
    "standalone shell" (applets before ``PATH``), so ``sh -c 'nc -v …'`` ran busybox's own nc
    and ``wget -T`` its crashing wget, whatever ``/usr/bin`` held; the dynamic build searches
    ``PATH`` and so reaches tests/conformance/nc and the stand-ins. The other applets stay the
    static busybox's."""
    entries = [
        oci.Entry(path="bin/sh", kind="file", mode=0o755, data=dynamic_busybox().read_bytes())
    ]
    for path, host in SH_LIBS.items():
        entries.append(oci.Entry(path=path, kind="file", mode=0o755, data=Path(host).read_bytes()))
    return entries


def bash() -> list[oci.Entry]:
    """The host's ``/bin/bash`` (Debian 12's, with its libtinfo; libc and the loader come with
    `path_sh`): upstream's agnhost is Alpine with bash, and the probe specs on terminating pods
    run ``/bin/bash -c`` scripts with ``trap _term SIGTERM``."""
    return [
        oci.Entry(path="bin/bash", kind="file", mode=0o755, data=Path("/bin/bash").read_bytes()),
        oci.Entry(
            path="lib/x86_64-linux-gnu/libtinfo.so.6",
            kind="file",
            mode=0o755,
            data=Path("/lib/x86_64-linux-gnu/libtinfo.so.6").read_bytes(),
        ),
    ]


def standins() -> list[oci.Entry]:
    """curl, dig and getent as shell scripts over busybox (see each script's header)."""
    here = Path(__file__).parent
    return [
        oci.Entry(path=path, kind="file", mode=0o755, data=(here / script).read_bytes())
        for path, script in STANDINS.items()
    ]


def e2e_busybox() -> list[oci.Entry]:
    """The harness's busybox with every applet in /bin too, as the upstream busybox image has
    them (specs run `/bin/sysctl`; Debian's busybox installs it as /sbin/sysctl)."""
    base = _busybox_entries()
    have = {e.path for e in base}
    names = sorted({e.path.rsplit("/", 1)[-1] for e in base if e.kind == "symlink"})
    extra = [
        oci.Entry(path=f"bin/{n}", kind="symlink", target="/bin/busybox")
        for n in names
        if f"bin/{n}" not in have
    ]
    return [*base, *extra]


def _web_files(module: Path, name: str) -> list[oci.Entry]:
    html = module / "test" / "images" / name / "html"
    return [
        oci.Entry(path=p.name, kind="file", mode=0o644, data=p.read_bytes())
        for p in sorted(html.iterdir())
        if p.is_file()
    ]


def make_all(*, agnhost: Path, nc: Path, module: Path, work: Path) -> list[Made]:
    """Write every image's layout under `work` (a fresh directory)."""
    harness_images = image_build.build_images()
    made = [Made(layout=harness_images["pause"].layout, references=("pause:3.10.2",))]
    specs: list[tuple[str, list[oci.Entry], oci.ImageConfig, tuple[str, ...]]] = [
        (
            "busybox",
            e2e_busybox(),
            oci.ImageConfig(cmd=("sh",), env=(PATH_ENV,)),
            ("e2e-test-images/busybox:1.37.0-1", "library/busybox:latest"),
        ),
        (
            "agnhost",
            agnhost_entries(agnhost, nc, module),
            oci.ImageConfig(entrypoint=("/agnhost",), cmd=("pause",), env=(PATH_ENV,)),
            ("e2e-test-images/agnhost:2.63.0", "e2e-test-images/agnhost:2.55"),
        ),
        (
            "kitten",
            agnhost_entries(agnhost, nc, module, extra=_web_files(module, "kitten")),
            oci.ImageConfig(entrypoint=("/agnhost",), cmd=("test-webserver",), env=(PATH_ENV,)),
            ("e2e-test-images/kitten:1.8",),
        ),
        (
            "nautilus",
            agnhost_entries(agnhost, nc, module, extra=_web_files(module, "nautilus")),
            oci.ImageConfig(entrypoint=("/agnhost",), cmd=("test-webserver",), env=(PATH_ENV,)),
            ("e2e-test-images/nautilus:1.8",),
        ),
        (
            "nginx",
            [
                *e2e_busybox(),
                oci.Entry(
                    path="usr/share/nginx/html/index.html", kind="file", mode=0o644, data=NGINX_HTML
                ),
            ],
            oci.ImageConfig(
                cmd=("httpd", "-f", "-p", "80", "-h", "/usr/share/nginx/html"), env=(PATH_ENV,)
            ),
            ("e2e-test-images/nginx:1.15-4", "e2e-test-images/nginx:1.27-0"),
        ),
        (
            "glibc-dns-testing",
            overlay(e2e_busybox(), standins()),
            oci.ImageConfig(cmd=("sh",), env=(PATH_ENV,)),
            ("e2e-test-images/glibc-dns-testing:2.0.0",),
        ),
        (
            "nonroot",
            e2e_busybox(),
            oci.ImageConfig(cmd=("sh",), env=(PATH_ENV,), user="1234"),
            ("e2e-test-images/nonroot:1.5",),
        ),
    ]
    for name, entries, config, references in specs:
        layout = work / name
        oci.write_layout(
            layout,
            entries=oci.with_parents(entries),
            config=config,
            names=[f"localhost/e2e-{name}:latest"],
        )
        made.append(Made(layout=layout, references=references))
    return made


def push_all(registry_host: str, *, agnhost: Path, nc: Path, module: Path) -> list[str]:
    """Make every image and push it under each of its references; return the pushed names."""
    pushed = []
    work = Path(tempfile.mkdtemp(prefix="na-e2e-images-"))
    try:
        for image in make_all(agnhost=agnhost, nc=nc, module=module, work=work):
            for reference in image.references:
                reg.push_image(registry_host, image.layout, reference)
                pushed.append(f"{registry_host}/{reference}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return pushed
