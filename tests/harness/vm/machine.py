"""One running test VM: a qcow2 overlay on the cached base image, qemu, and its control channel.

    with Machine(image=image, run_dir=tmp) as vm:   # boots; close() kills qemu, drops the overlay
        vm.wait_for_boot()
        rc, out, err = vm.run("systemctl is-active nodeagent", timeout=30)
        vm.put("/etc/x", b"data"); vm.get("/etc/x")

Everything the VM leaves on the host lives in ``run_dir``: ``console.log`` (kept for
post-mortems), ``overlay.qcow2`` and ``control.sock`` (deleted on close). qemu dies with this
process (``setpriv --pdeathsig``), and an ``atexit`` hook closes any machine still open, so no VM
outlives a crashed or interrupted test run. Timeouts raise :class:`VmTimeout` with the tail of
the guest console.
"""

from __future__ import annotations

import atexit
import contextlib
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from harness.vm import qemu, rootfs
from harness.vm.control import ControlChannel, VmError, VmTimeout, b64, unb64
from harness.vm.image import Image

RELAY = Path(__file__).with_name("relay.py")
# The guest reaches the host's kube-apiserver at https://kubernetes:6443 (see forward_apiserver).
APISERVER_GUEST_PORT = 6443
HOST_MARGIN_S = 30.0  # host-side wait beyond a command's own guest-side timeout

_open_machines: set[Machine] = set()


class RunResult(NamedTuple):
    rc: int
    stdout: str
    stderr: str


class GuestCommandFailed(VmError):
    pass


class Machine:
    def __init__(
        self,
        *,
        image: Image,
        run_dir: Path,
        memory_mb: int = 2048,
        cpus: int = 2,
        boot_timeout: float = 300.0,
        extra_disks: tuple[Path, ...] = (),
        taps: tuple[qemu.TapNic, ...] = (),
    ) -> None:
        self.image = image
        self.run_dir = run_dir
        self.console_log = run_dir / "console.log"
        self.overlay = run_dir / "overlay.qcow2"
        self.control_socket = run_dir / "control.sock"
        self.apiserver_target = run_dir / "apiserver.target"
        self.boot_timeout = boot_timeout
        self._memory_mb = memory_mb
        self._cpus = cpus
        self._extra_disks = extra_disks
        self._taps = taps
        self._proc: subprocess.Popen[bytes] | None = None
        self._channel = ControlChannel(socket_path=self.control_socket)
        self._started = 0.0
        self.boot_seconds: float | None = None

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.close()
        subprocess.run(
            ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2",
             "-b", str(self.image.disk), str(self.overlay)],
            check=True, capture_output=True,
        )  # fmt: skip
        self.console_log.write_bytes(b"")
        self._launch()

    def _launch(self) -> None:
        """Start qemu on the existing overlay (a first boot, or a boot after a guest reboot)."""
        self.control_socket.unlink(missing_ok=True)
        spec = qemu.QemuSpec(
            disk=self.overlay,
            kernel=self.image.kernel,
            initrd=self.image.initrd,
            control_socket=self.control_socket,
            console_log=self.console_log,
            memory_mb=self._memory_mb,
            cpus=self._cpus,
            extra_disks=self._extra_disks,
            taps=self._taps,
            forwards=(
                qemu.GuestForward(
                    guest_ip=rootfs.APISERVER_IP,
                    guest_port=APISERVER_GUEST_PORT,
                    command=(sys.executable, str(RELAY), str(self.apiserver_target),
                             str(self.run_dir / "relay.log")),
                ),
            ),
        )  # fmt: skip
        with open(self.run_dir / "qemu.log", "wb") as qemu_log:
            self._proc = subprocess.Popen(
                # qemu gets SIGKILL if this process dies, whatever the way.
                ["setpriv", "--pdeathsig", "KILL", *qemu.qemu_argv(spec)],
                stdin=subprocess.DEVNULL,
                stdout=qemu_log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._started = time.monotonic()
        _open_machines.add(self)

    def wait_for_poweroff(self, timeout: float) -> float:
        """Wait until the guest has shut down (qemu runs with ``-no-reboot``: a guest reboot
        or poweroff ends qemu); return the seconds waited. The overlay is kept, so
        :meth:`boot_again` boots the same disk."""
        if self._proc is None:
            raise VmError("the VM is not running")
        started = time.monotonic()
        try:
            self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise self._timeout(f"the guest did not shut down within {timeout}s") from None
        self._channel.close()
        self._proc = None
        return time.monotonic() - started

    def boot_again(self, timeout: float | None = None) -> float:
        """After :meth:`wait_for_poweroff`: start qemu on the same overlay (the guest's
        "reboot"), reconnect the control channel and wait for the boot; return its seconds."""
        if self._proc is not None:
            raise VmError("the VM is still running: wait_for_poweroff() first")
        self._channel = ControlChannel(socket_path=self.control_socket)
        with open(self.console_log, "ab") as console:
            console.write(b"\n--- boot again (guest reboot) ---\n")
        self._launch()
        return self.wait_for_boot(timeout)

    def close(self) -> None:
        """Kill qemu and delete the overlay and socket; the console log stays. Idempotent."""
        self._channel.close()
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            self._proc = None
        self.overlay.unlink(missing_ok=True)
        self.control_socket.unlink(missing_ok=True)
        _open_machines.discard(self)

    def __enter__(self) -> Machine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait_for_boot(self, timeout: float | None = None) -> float:
        """Wait until the agent answers and systemd finished booting; return seconds since start."""
        deadline = time.monotonic() + (timeout or self.boot_timeout)
        self._channel.connect(timeout=30)
        sent: set[int] = set()
        while True:
            self._check_alive()
            sent.add(self._channel.send("ping"))
            try:
                self._channel.wait_reply(sent, timeout=min(5.0, deadline - time.monotonic()))
                break
            except VmTimeout:
                if time.monotonic() > deadline:
                    raise self._timeout("the guest agent did not answer") from None
        left = max(1.0, deadline - time.monotonic())
        rc, out, _ = self.run("systemctl is-system-running --wait", timeout=left)
        state = out.strip()
        if state not in {"running", "degraded"}:
            raise self._failure(f"boot did not finish: systemd state {state!r} (rc {rc})")
        if state == "degraded":
            failed = self.run("systemctl --failed --no-legend --plain", timeout=30).stdout
            raise self._failure(f"boot finished degraded; failed units:\n{failed}")
        self.boot_seconds = time.monotonic() - self._started
        return self.boot_seconds

    def forward_apiserver(self, host: str, port: int) -> str:
        """Route the guest's ``https://kubernetes:6443`` to ``host:port``; return that guest URL.

        Takes effect for the next connection: the relay reads the target per connection.
        """
        self.apiserver_target.write_text(f"{host}:{port}\n")
        return f"https://{rootfs.APISERVER_NAME}:{APISERVER_GUEST_PORT}"

    # --- guest control ---------------------------------------------------------------------------

    def run(
        self,
        cmd: str | Sequence[str],
        timeout: float = 60.0,
        *,
        input: bytes = b"",
        env: Mapping[str, str] | None = None,
    ) -> RunResult:
        """Run ``cmd`` (a bash command line, or an argv) as root in the guest."""
        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        reply = self._request(
            "run", timeout=timeout + HOST_MARGIN_S,
            argv=argv, timeout_s=timeout, stdin=b64(input), env=dict(env or {}),
        )  # fmt: skip
        result = RunResult(
            rc=int(reply["rc"]),
            stdout=unb64(reply["stdout"]).decode(errors="replace"),
            stderr=unb64(reply["stderr"]).decode(errors="replace"),
        )
        if reply["timed_out"]:
            raise self._timeout(
                f"guest command timed out after {timeout}s and was killed: {argv!r}\n"
                f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
            )
        return result

    def check(
        self,
        cmd: str | Sequence[str],
        timeout: float = 60.0,
        *,
        input: bytes = b"",
        env: Mapping[str, str] | None = None,
    ) -> str:
        """Like :meth:`run` but a non-zero exit raises with the output; returns stdout."""
        result = self.run(cmd, timeout, input=input, env=env)
        if result.rc != 0:
            raise GuestCommandFailed(
                f"guest command {cmd!r} exited {result.rc}\n"
                f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}"
            )
        return result.stdout

    def put(self, path: str, data: bytes, mode: int = 0o644, timeout: float = 120.0) -> None:
        self._request("put", timeout=timeout, path=path, data=b64(data), mode=mode)

    def get(self, path: str, timeout: float = 120.0) -> bytes:
        return unb64(self._request("get", timeout=timeout, path=path)["data"])

    def console_tail(self, lines: int = 60) -> str:
        try:
            text = self.console_log.read_bytes().decode(errors="replace")
        except FileNotFoundError:
            return "(no console log)"
        return "\n".join(text.splitlines()[-lines:])

    # --- internals -------------------------------------------------------------------------------

    def _request(self, op: str, *, timeout: float, **fields: object) -> dict[str, Any]:
        self._check_alive()
        try:
            return self._channel.request(op, timeout=timeout, **fields)
        except VmTimeout as e:
            raise self._timeout(f"{op}: {e}") from None

    def _check_alive(self) -> None:
        if self._proc is None:
            raise VmError("the VM is not running")
        if (code := self._proc.poll()) is not None:
            qemu_log = (self.run_dir / "qemu.log").read_text(errors="replace")[-2000:]
            raise self._failure(f"qemu exited with {code}; qemu log:\n{qemu_log}")

    def _timeout(self, what: str) -> VmTimeout:
        return VmTimeout(self._with_console(what))

    def _failure(self, what: str) -> VmError:
        return VmError(self._with_console(what))

    def _with_console(self, what: str) -> str:
        return f"{what}\n--- guest console tail ({self.console_log}) ---\n{self.console_tail()}"


@atexit.register
def _close_all() -> None:
    for machine in list(_open_machines):
        with contextlib.suppress(Exception):
            machine.close()
