"""Network namespaces for the proxy integration tests: a node that routes, pods, a client.

::

    client (198.51.100.10) --- cl0 [ node 198.51.100.1 ] vb1..vb3, vp0 --- pods 10.244.0.11-13, .20
                                     | sink0 (default route)
                                     sink (192.0.2.2: swallows what nobody else takes)

Pods are /32 addresses behind point-to-point veths with proxy ARP on the node side (as Calico
does), so every pod packet is routed by the node, both ways, through its conntrack and our rules.
Backends serve HTTP on 8080 (busybox httpd, answering their own name) and UDP on 5353 (answering
their name). Only the namespaces are touched: nothing here runs in the root namespace except
creating and deleting the namespaces themselves. The client and sink ranges are documentation
ranges (TEST-NET-1/2); pod addresses come from the harness's cluster CIDR.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

NODE_IP = "198.51.100.1"
CLIENT_IP = "198.51.100.10"
POD_CLIENT_IP = "10.244.0.20"
BACKENDS = {"b1": "10.244.0.11", "b2": "10.244.0.12", "b3": "10.244.0.13"}

UDP_SERVER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 5353))
while True:
    data, peer = s.recvfrom(512)
    s.sendto(sys.argv[1].encode(), peer)
"""

PROBE = """
import json, socket, sys
host, port, count, proto, sport, timeout = sys.argv[1:7]
out = []
for _ in range(int(count)):
    try:
        if proto == "udp":
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if int(sport):
                s.bind(("0.0.0.0", int(sport)))
            s.settimeout(float(timeout))
            s.sendto(b"?", (host, int(port)))
            out.append(s.recv(512).decode())
        else:
            s = socket.create_connection((host, int(port)), timeout=float(timeout))
            s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
            out.append(data.split(b"\\r\\n\\r\\n", 1)[-1].decode().strip())
        s.close()
    except ConnectionRefusedError:
        out.append("refused")
    except (TimeoutError, socket.timeout):
        out.append("timeout")
    except OSError as e:
        out.append(f"error: {e.strerror}")
print(json.dumps(out))
"""


def sh(*argv: str, check: bool = True) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return done.stdout


@dataclass
class Topology:
    prefix: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    www: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="na-proxy-www-")))

    def ns(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    @property
    def node(self) -> str:
        return self.ns("node")

    def names(self) -> list[str]:
        return [self.ns(n) for n in ("node", "client", "sink", "pod", *BACKENDS)]

    def up(self) -> None:
        for name in self.names():
            sh("ip", "netns", "add", name)
            sh("ip", "-n", name, "link", "set", "lo", "up")
        node = self.node
        sh("ip", "netns", "exec", node, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        self._link("sink0", "sink", "192.0.2.1/30", "192.0.2.2/30")
        sh("ip", "-n", node, "route", "add", "default", "via", "192.0.2.2")
        self._link("cl0", "client", f"{NODE_IP}/24", f"{CLIENT_IP}/24")
        sh("ip", "-n", self.ns("client"), "route", "add", "default", "via", NODE_IP)
        for name, ip in [*BACKENDS.items(), ("pod", POD_CLIENT_IP)]:
            self._pod(name, ip)
        for name in BACKENDS:
            (self.www / name).mkdir()
            (self.www / name / "index.html").write_text(f"{name}\n")
            self._serve(name, "busybox", "httpd", "-f", "-p", "8080", "-h", str(self.www / name))
            self._serve(name, "python3", "-c", UDP_SERVER, name)
        for name, ip in BACKENDS.items():
            self._wait_serving(name, ip)

    def _link(self, device: str, peer_ns: str, node_cidr: str, peer_cidr: str) -> None:
        node, peer = self.node, self.ns(peer_ns)
        sh("ip", "-n", node, "link", "add", device, "type", "veth", "peer", "name", "eth0",
           "netns", peer)  # fmt: skip
        sh("ip", "-n", node, "addr", "add", node_cidr, "dev", device)
        sh("ip", "-n", node, "link", "set", device, "up")
        sh("ip", "-n", peer, "addr", "add", peer_cidr, "dev", "eth0")
        sh("ip", "-n", peer, "link", "set", "eth0", "up")

    def _pod(self, name: str, ip: str) -> None:
        node, pod, device = self.node, self.ns(name), f"v{name}"
        sh("ip", "-n", node, "link", "add", device, "type", "veth", "peer", "name", "eth0",
           "netns", pod)  # fmt: skip
        sh("ip", "-n", node, "link", "set", device, "up")
        sh("ip", "netns", "exec", node, "sysctl", "-qw", f"net.ipv4.conf.{device}.proxy_arp=1")
        sh("ip", "netns", "exec", node, "sysctl", "-qw", f"net.ipv4.neigh.{device}.proxy_delay=0")
        sh("ip", "-n", node, "route", "add", f"{ip}/32", "dev", device)
        sh("ip", "-n", pod, "addr", "add", f"{ip}/32", "dev", "eth0")
        sh("ip", "-n", pod, "link", "set", "eth0", "up")
        sh("ip", "-n", pod, "route", "add", "169.254.1.1", "dev", "eth0", "scope", "link")
        sh("ip", "-n", pod, "route", "add", "default", "via", "169.254.1.1", "dev", "eth0")

    def _wait_serving(self, name: str, ip: str) -> None:
        for proto, port in (("tcp", 8080), ("udp", 5353)):
            for _ in range(50):
                argv = ["python3", "-c", PROBE, ip, str(port), "1", proto, "0", "0.2"]
                if sh("ip", "netns", "exec", self.ns("pod"), *argv).strip() == f'["{name}"]':
                    break
            else:
                raise RuntimeError(f"backend {name} does not answer on {proto}/{port}")

    def _serve(self, name: str, *argv: str) -> None:
        self.procs.append(
            subprocess.Popen(
                ["ip", "netns", "exec", self.ns(name), *argv],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )

    def down(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for name in self.names():
            sh("ip", "netns", "del", name, check=False)
        shutil.rmtree(self.www, ignore_errors=True)

    async def run(self, ns: str, *argv: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            "ip", "netns", "exec", self.ns(ns), *argv,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} in {ns} failed: {err.decode().strip()}")
        return out.decode()

    async def probe(
        self,
        src: str,
        host: str,
        port: int,
        *,
        count: int = 1,
        proto: str = "tcp",
        sport: int = 0,
        wait: float = 1.0,
    ) -> list[str]:
        """``count`` connections (or UDP exchanges) from netns ``src``: the answering backend's
        name each, or refused / timeout / error: ..."""
        out = await self.run(
            src, "python3", "-c", PROBE, host, str(port), str(count), proto, str(sport),
            str(wait),
        )  # fmt: skip
        result: list[str] = json.loads(out)
        return result
