"""Pulled images are not a side door (the kubelet's ``PullManager``, gate
``KubeletEnsureSecretPulledImages``).

Before a pull the agent records its intent; after a successful pull, which credential pulled
the image (``pullrecords``). When a pod asks for an image already on the node,
:meth:`PullManager.must_attempt_pull` decides whether the pod may use it as it is, or must
pull it again with its own credentials (the registry then says whether they are good):

- the verification policy (``pullpolicy``) may exempt the image (e.g. one the agent never
  pulled, under ``NeverVerifyPreloadedImages``);
- an image pulled without credentials serves every pod;
- else the pod needs a pull secret the image was pulled with (same uid, namespace and name, or
  a secret whose credential has the same hash; either way the record learns it) or the same
  service account.

After a restart, pull intents left behind whose image the runtime has become pulled records
without credentials (so those images are checked on their next use). After image garbage
collection, the records of images no longer on the node are removed
(:meth:`PullManager.prune_unknown_records`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import datetime
from typing import Final

from nodeagent.credentialprovider.pullpolicy import Enforcer, trim_tag_digest
from nodeagent.kuberuntime.pullrecords import (
    PullCredentials,
    PulledRecord,
    PullRecords,
    RecordError,
    SecretRef,
    ServiceAccountRef,
)
from nodeagent.log import Logger, get_logger

WRITE_WHILE_MATCHING_LIMIT: Final = 100

PodCredentials = Callable[[], Awaitable[tuple[Sequence[SecretRef], ServiceAccountRef | None]]]


def merge_credentials(
    record: PulledRecord, image: str, new: PullCredentials | None, now: Callable[[], datetime]
) -> PulledRecord | None:
    """``record`` with ``new`` credentials for ``image`` (no tag or digest); None when
    nothing changes (the kubelet's ``pulledRecordMergeNewCreds``)."""
    if new is None or not (new.node_pods_accessible or new.secrets or new.service_accounts):
        return None
    current = record.credentials.get(image)
    if current is None:
        merged = new
    elif current.node_pods_accessible:
        return None
    elif new.node_pods_accessible:
        merged = PullCredentials(node_pods_accessible=True)
    elif new.secrets:
        by_key = {(s.namespace, s.name, s.uid): s.credential_hash for s in current.secrets}
        changed = any(
            by_key.get((s.namespace, s.name, s.uid)) != s.credential_hash for s in new.secrets
        )
        if not changed:
            return None
        by_key.update({(s.namespace, s.name, s.uid): s.credential_hash for s in new.secrets})
        secrets = tuple(sorted(SecretRef(ns, n, u, h) for (ns, n, u), h in by_key.items()))
        merged = dataclasses.replace(current, secrets=secrets)
    else:
        accounts = set(current.service_accounts)
        if set(new.service_accounts) <= accounts:
            return None
        merged = dataclasses.replace(
            current, service_accounts=tuple(sorted(accounts | set(new.service_accounts)))
        )
    credentials = {**record.credentials, image: merged}
    return dataclasses.replace(record, credentials=credentials, last_updated=now())


class PullManager:
    def __init__(
        self, *, records: PullRecords, policy: Enforcer, log: Logger | None = None
    ) -> None:
        self._records = records
        self._policy = policy
        self._log = log or get_logger("kuberuntime")
        self._intents: dict[str, int] = {}

    def record_pull_intent(self, image: str) -> None:
        """Raises OSError when the intent cannot be written (the pull does not happen)."""
        self._records.write_intent(image)
        self._intents[image] = self._intents.get(image, 0) + 1

    def record_pulled(self, image: str, image_ref: str, creds: PullCredentials | None) -> None:
        try:
            self._write_if_changed(image, image_ref, creds)
        except (OSError, ValueError) as e:
            self._log.error(
                "failed to write image pulled record", image_ref=image_ref, error=str(e)
            )
            return
        self._release_intent(image)

    def record_pull_failed(self, image: str) -> None:
        self._release_intent(image)

    def _release_intent(self, image: str) -> None:
        if self._intents.get(image, 0) <= 1:
            try:
                self._records.delete_intent(image)
            except OSError as e:
                self._log.error("failed to remove image pull intent", image=image, error=str(e))
                return
            self._intents.pop(image, None)
        else:
            self._intents[image] -= 1

    def _write_if_changed(self, image: str, image_ref: str, creds: PullCredentials | None) -> None:
        bare = trim_tag_digest(image)
        try:
            record = self._records.pulled_record(image_ref)
        except RecordError as e:
            self._log.info("failed to retrieve an ImagePulledRecord", image=image, error=str(e))
            record = None
        if record is None:
            mapping = {bare: creds} if creds is not None else {}
            self._records.write_pulled(
                PulledRecord(
                    image_ref=image_ref, last_updated=self._records.now(), credentials=mapping
                )
            )
            return
        merged = merge_credentials(record, bare, creds, self._records.now)
        if merged is not None:
            self._records.write_pulled(merged)

    async def must_attempt_pull(
        self, image: str, image_ref: str, pod_credentials: PodCredentials
    ) -> bool:
        """Whether the pod must pull ``image`` (present as ``image_ref``) with its own
        credentials before using it. ``pod_credentials`` (asked only when needed) may raise:
        the error is the caller's."""
        if not image_ref:
            return True
        try:
            record = self._records.pulled_record(image_ref)
            pulled = (
                record is not None
                or self._intents.get(image, 0) > 0
                or self._records.intent_exists(image)
            )
        except (RecordError, OSError) as e:
            self._log.error("Unable to access cache records about image pulls", error=str(e))
            return True
        if not self._policy(image, pulled):
            return False
        if record is None:
            return True
        try:
            bare = trim_tag_digest(image)
        except ValueError:
            return True
        cached = record.credentials.get(bare)
        if cached is None:
            return True
        if cached.node_pods_accessible:
            return False
        if not cached.secrets and not cached.service_accounts:
            return True
        secrets, account = await pod_credentials()
        room = len(cached.secrets) < WRITE_WHILE_MATCHING_LIMIT
        for mine in secrets:
            for known in cached.secrets:
                same_hash = (
                    bool(known.credential_hash) and mine.credential_hash == known.credential_hash
                )
                same_secret = (mine.uid, mine.namespace, mine.name) == (
                    known.uid,
                    known.namespace,
                    known.name,
                )
                if same_hash:
                    if not same_secret and room:
                        self._remember(image, image_ref, mine)  # another secret, same login
                    return False
                if same_secret and room:
                    # The same secret with new content: its new login is not checked here
                    # (the kubelet's choice), only remembered.
                    self._remember(image, image_ref, mine)
                    return False
        return not (account is not None and account in cached.service_accounts)

    def _remember(self, image: str, image_ref: str, secret: SecretRef) -> None:
        try:
            self._write_if_changed(image, image_ref, PullCredentials(secrets=(secret,)))
        except (OSError, ValueError) as e:
            self._log.error("failed to write an image pulled record", image=image, error=str(e))

    def initialize(self, present: Sequence[tuple[str, Sequence[str]]]) -> None:
        """Once, before the first image: rewrite the records of an older version, then turn
        the intents of a previous run whose image is now present (``(image ID, its tags and
        digests)``) into pulled records without credentials."""
        for error in self._records.migrate():
            self._log.error("Error migrating image pull records", error=error)
        try:
            found, errors = self._records.intents()
        except OSError as e:
            found, errors = [], [str(e)]
        if errors:
            self._log.error(
                "there were errors listing ImagePullIntents, continuing with an incomplete "
                "records list",
                error="; ".join(errors),
            )
        intents = set(found)
        for image_id, names in present:
            for name in intents.intersection(names):
                try:
                    self._write_if_changed(name, image_id, None)
                except (OSError, ValueError) as e:
                    self._log.error(
                        "failed to write an image pull record", image_ref=image_id, error=str(e)
                    )
                    continue
                try:
                    self._records.delete_intent(name)
                except OSError as e:
                    self._log.v(2).info(
                        "failed to remove image pull intent file", image_name=name, error=str(e)
                    )

    def prune_unknown_records(self, image_ids: Collection[str], until: datetime) -> list[str]:
        """Remove the pulled records of images no longer on the node (not in ``image_ids``)
        that were last updated before ``until``, a time taken before ``image_ids`` was listed
        (the kubelet's ``PruneUnknownRecords``, run after image garbage collection). Returns
        the image refs whose records were removed."""
        try:
            records, errors = self._records.pulled_records()
        except OSError as e:
            records, errors = [], [str(e)]
        if errors:
            self._log.error(
                "there were errors listing ImagePulledRecords, garbage collection will "
                "proceed with incomplete records list",
                error="; ".join(errors),
            )
        removed = []
        # Records keep whole seconds: one written in the second ``until`` falls in is kept.
        since = until.replace(microsecond=0)
        for record in records:
            if record.last_updated >= since or record.image_ref in image_ids:
                continue
            try:
                self._records.delete_pulled(record.image_ref)
            except OSError as e:
                self._log.error(
                    "failed to remove an ImagePulledRecord",
                    image_ref=record.image_ref,
                    error=str(e),
                )
                continue
            removed.append(record.image_ref)
        return removed
