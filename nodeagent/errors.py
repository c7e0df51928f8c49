"""The one error tree of nodeagent.

Every error that reports a failure of the agent's own work or of a component it talks to
derives from :class:`AgentError`, so a caller can tell them from a bug's exception::

    AgentError
    ├── ConfigError              bad configuration file or flag (names the field path and value)
    ├── ManagerCrashed           a manager's run() raised; carries the manager name
    ├── ApiError                 kube-apiserver (apiserver.errors)
    │   ├── BadRequest, Unauthorized, Forbidden, NotFound, Gone, Invalid, TooManyRequests,
    │   │   ServerError, Timeout, TransportError
    │   ├── Conflict
    │   │   └── AlreadyExists
    │   └── LeaseUpdateFailed    every try of one Lease renewal failed (nodelease)
    ├── CriError                 container runtime over CRI (kuberuntime.errors)
    │   └── CriNotFound, CriUnavailable, CriDeadlineExceeded, CriUnimplemented, CriUnknown,
    │       CriVersionError
    ├── CsiError                 a CSI driver or a registering plugin over gRPC (csi.errors)
    ├── NftError                 nftables transactions (nft.errors)
    │   └── NotFound, Exists, Busy, InvalidTransaction
    ├── LogindError              logind over D-Bus (logind.client)
    │   └── BusGone              the system bus connection is lost
    ├── DbusError                systemd over D-Bus (systemd.dbus)
    ├── CgroupError              a cgroupfs write or rmdir (cm.cgroupfs); also an OSError
    ├── ReservedEnforcementError  a reserved cgroup cannot be enforced (cm.manager)
    ├── MountError               mount/umount of a volume (volumemanager.mounter)
    ├── ImageGCError             an image GC pass that failed or freed too little (gc.images)
    ├── ConntrackError           the conntrack tool failed (proxy.conntrack)
    ├── PluginError              a credential plugin's run failed (credentialprovider.plugin)
    ├── JoinError                `nodeagent join` refused or failed (join.token)
    │   └── SignatureMissing     cluster-info not yet signed for the token: retried (join.verify)
    ├── CertificateError         a client CSR denied, failed or not fitting our key (certificate)
    ├── IsolatedError            the certificate helper process failed (certificate.isolated)
    ├── ServingCertError         a serving CSR denied, failed or not fitting (server.servingcert)
    └── ServerError              the kubelet API cannot listen or load its cert (server.manager)

Outside the tree, deliberately:

- Bad input, as ``ValueError`` (or msgspec's ``ValidationError``): the code that raises them
  parses, beside ``int()``, ``ipaddress`` and msgspec that raise ``ValueError`` for the same
  input, so one ``except ValueError`` takes both; each becomes a message (a waiting reason,
  an Event, an HTTP 400, a log line) where it is caught: kuberuntime.env.ContainerConfigError,
  kuberuntime.dns.PodDNSError, kuberuntime.cgroupdriver.UnknownCgroupDriver,
  podspec.validation.PodSpecError, prober.prober.PortError, staticpods.manifest.ManifestError,
  yamlshape.ShapeError (with yamlshape.TooBig, yamlshape.NotRegularFile),
  containerlogs.options.LogOptionsError, server.streaming.BadOptions, server.wire.WireError,
  volumemanager.content.writer.InvalidPath, apiserver.patch.JsonPatchError (the fake
  apiserver's JSON patch), volumemanager.affinity.AffinityError (a PV's node affinity that
  does not match, or cannot be read), config.credentialproviders.ProviderConfigError (the
  plugin configuration file), credentialprovider.dockerconfig.DockerConfigError (a pull
  secret's content), kuberuntime.pullrecords.RecordError (a pull record file on disk),
  gotext.DurationRangeError (a Go duration beyond int64).
- A result carried from a helper to its caller in the same manager, already worded as the
  kubelet's message or status, never reported as an error of its own:
  kuberuntime.images.ImageFailure (a container failure and when to retry),
  kuberuntime.hooks.HookError (the error part of a hook's message),
  containerlogs.service.LogRequestError (an HTTP status and text),
  volumemanager.content.errors.VolumeSetupError (``MountVolume.SetUp failed`` text),
  volumemanager.subpath.SubPathEscape (a subPath that leaves its volume: the container's error),
  volumemanager.csi.drivers.CsiUnknownDriver (a CSI driver not registered yet: the volume's
  ``FailedMount`` text),
  nodestatus.setters.AddressError (the node's address problem, a Ready message),
  config.problem.Invalid (problems not yet located; load turns them into ConfigError),
  prober.http._HttpError (private to the HTTP probe),
  kuberuntime.puller.PullFailed (every credential's pull failed: the kubelet's pull message),
  credentialprovider.plugin.provider.MissingAnnotation (a service account lacks an annotation
  the plugin requires: the pull goes on without that plugin's credentials),
  gotext._Invalid (private to the duration parser: which part of a duration is wrong),
  beneath.NotBeneath (an ``OSError``: a path that leaves its directory or goes through a
  symlink; ``/logs/`` answers 404).
- A debugging tool's refusal: proxy.tracer.TraceError (``nodeagent proxy trace``).

Low-level exceptions are wrapped with what failed (file path, RPC name, D-Bus property) and
chained with ``raise ... from ...``.
"""

from __future__ import annotations


class AgentError(Exception):
    """Root of every error nodeagent raises on purpose."""


class ConfigError(AgentError):
    """Invalid configuration.

    ``path`` is the dotted field path as the user wrote it (``kubelet.maxPods``,
    ``kubelet.shutdownGracePeriodByPodPriority[1].priority``) or the flag (``--node-ip``);
    ``value`` the offending value as the user wrote it; ``message`` what is wrong and what is
    allowed. ``source`` is the file, ``line`` the line in it when known. ``summary`` replaces
    ``"path: message"`` when a whole sentence reads better (cross-field checks). ``more``
    holds the other problems found in the same pass; ``str()`` lists them all, one per line.
    """

    def __init__(
        self,
        path: str,
        message: str,
        value: object = None,
        *,
        source: str = "",
        line: int | None = None,
        summary: str = "",
        more: tuple[ConfigError, ...] = (),
    ) -> None:
        self.path = path
        self.value = value
        self.message = message
        self.source = source
        self.line = line
        self.summary = summary
        self.more = more
        super().__init__(self.__str__())

    @property
    def all(self) -> tuple[ConfigError, ...]:
        """This problem followed by the others found in the same pass."""
        return (self, *self.more)

    def _one(self) -> str:
        where = self.source
        if where and self.line is not None:
            where = f"{where}:{self.line}"
        text = self.summary or (f"{self.path}: {self.message}" if self.path else self.message)
        return f"{where}: {text}" if where else text

    def __str__(self) -> str:
        return "\n".join(e._one() for e in self.all)


class ManagerCrashed(AgentError):
    """A manager's ``run()`` raised; the agent stops with a non-zero exit."""

    def __init__(self, name: str, cause: BaseException) -> None:
        self.name = name
        self.cause = cause
        super().__init__(f"manager {name!r} crashed: {type(cause).__name__}: {cause}")
