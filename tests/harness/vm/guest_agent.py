"""The guest half of the VM control channel: runs inside the test VM, standard library only.

It serves one virtio-serial port (``/dev/virtio-ports/org.nodeagent.ctl``) with newline-delimited
JSON requests, one at a time, and answers each with a line carrying the same ``id``:

- ``{"op": "ping"}`` -> ``{"boot_id": ..., "uptime": seconds}``
- ``{"op": "run", "argv": [...], "timeout_s": s, "env": {...}, "stdin": b64}``
  -> ``{"rc": int, "stdout": b64, "stderr": b64, "timed_out": bool}``; on timeout the whole
  process group is killed, so nothing the command started lingers.
- ``{"op": "put", "path": ..., "data": b64, "mode": int}`` -> ``{}`` (parents created, atomic)
- ``{"op": "get", "path": ...}`` -> ``{"data": b64}``
Failures answer ``{"error": "..."}``. The image build installs it as ``nodeagent-vm-agent.service``.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PORT = "/dev/virtio-ports/org.nodeagent.ctl"
DEFAULT_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "DEBIAN_FRONTEND": "noninteractive",
    "SYSTEMD_PAGER": "",
}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def op_ping(req: dict[str, Any]) -> dict[str, Any]:
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return {"boot_id": boot_id, "uptime": uptime}


def op_run(req: dict[str, Any]) -> dict[str, Any]:
    env = {**DEFAULT_ENV, **req.get("env", {})}
    stdin = base64.b64decode(req.get("stdin", ""))
    proc = subprocess.Popen(
        req["argv"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd="/root",
        start_new_session=True,
    )
    timed_out = False
    try:
        out, err = proc.communicate(stdin, timeout=float(req.get("timeout_s", 60)))
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    return {"rc": proc.returncode, "stdout": _b64(out), "stderr": _b64(err), "timed_out": timed_out}


def op_put(req: dict[str, Any]) -> dict[str, Any]:
    path = Path(req["path"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.vm-agent-tmp")
    tmp.write_bytes(base64.b64decode(req["data"]))
    tmp.chmod(int(req.get("mode", 0o644)))
    tmp.replace(path)
    return {}


def op_get(req: dict[str, Any]) -> dict[str, Any]:
    return {"data": _b64(Path(req["path"]).read_bytes())}


OPS = {"ping": op_ping, "run": op_run, "put": op_put, "get": op_get}


def handle(line: bytes) -> dict[str, Any]:
    try:
        req = json.loads(line)
    except ValueError as e:
        return {"id": None, "error": f"bad request line: {e}"}
    try:
        reply = OPS[req["op"]](req)
    except Exception as e:  # every failure goes back to the host, the agent keeps serving
        reply = {"error": f"{type(e).__name__}: {e}"}
    reply["id"] = req.get("id")
    return reply


def serve(port: str) -> None:
    while not os.path.exists(port):
        time.sleep(0.2)
    print(f"serving {port}", file=sys.stderr, flush=True)
    serve_fd(os.open(port, os.O_RDWR))


def serve_fd(fd: int) -> None:
    buf = bytearray()
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:  # no host connected: the port reads EOF until one connects
            time.sleep(0.2)
            continue
        start = len(buf)
        buf += chunk
        nl = buf.find(b"\n", start)
        while nl >= 0:
            line = bytes(buf[:nl])
            del buf[: nl + 1]
            if line.strip():
                out = json.dumps(handle(line)).encode() + b"\n"
                view = memoryview(out)
                while view:
                    view = view[os.write(fd, view) :]
            nl = buf.find(b"\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--fd"]:  # tests: serve an inherited socket instead of the port
        serve_fd(int(sys.argv[2]))
    else:
        serve(sys.argv[1] if len(sys.argv) > 1 else PORT)
