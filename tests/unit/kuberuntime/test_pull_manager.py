"""Whether a pod may use an image already on the node (the kubelet's
``PullManager.MustAttemptImagePull`` cases), the pull intents' life, what a restart keeps, and
the records' pruning after image GC. Real files under ``tmp_path``; no runtime."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from nodeagent.credentialprovider import pullpolicy
from nodeagent.kuberuntime.pullmanager import WRITE_WHILE_MATCHING_LIMIT, PullManager
from nodeagent.kuberuntime.pullrecords import (
    PullCredentials,
    PulledRecord,
    PullRecords,
    SecretRef,
    ServiceAccountRef,
    cache_filename,
)

T0 = dt.datetime(2026, 11, 27, 12, 0, 0, tzinfo=dt.UTC)
IMAGE = "registry.example.com/team/app:1"
BARE = "registry.example.com/team/app"
REF = "sha256:" + "a" * 64
REGCRED = SecretRef("default", "regcred", "uid-1", "hash-1")
ACCOUNT = ServiceAccountRef("default", "builder", "sa-uid")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


def manager(
    tmp_path: Path,
    policy: str = pullpolicy.NEVER_VERIFY_PRELOADED,
    allowlist: Sequence[str] = (),
    clock: Clock | None = None,
) -> PullManager:
    return PullManager(
        records=PullRecords(tmp_path, now=clock or Clock()),
        policy=pullpolicy.enforcer(policy, allowlist),
    )


def seed(tmp_path: Path, creds: PullCredentials | None, *, image: str = BARE) -> PullRecords:
    records = PullRecords(tmp_path, now=Clock())
    mapping = {image: creds} if creds is not None else {}
    records.write_pulled(PulledRecord(image_ref=REF, last_updated=T0, credentials=mapping))
    return records


def pod(
    *secrets: SecretRef, account: ServiceAccountRef | None = None
) -> tuple[list[SecretRef], ServiceAccountRef | None]:
    return list(secrets), account


class Asked:
    """The pod's credentials, counting how often they were asked for."""

    def __init__(self, answer: tuple[list[SecretRef], ServiceAccountRef | None]) -> None:
        self.answer = answer
        self.calls = 0

    async def __call__(self) -> tuple[list[SecretRef], ServiceAccountRef | None]:
        self.calls += 1
        return self.answer


def stored(tmp_path: Path) -> PullCredentials:
    record = PullRecords(tmp_path, now=Clock()).pulled_record(REF)
    assert record is not None
    return record.credentials[BARE]


@pytest.mark.parametrize(
    ("creds", "pod_creds", "must_pull"),
    [
        pytest.param(
            PullCredentials(node_pods_accessible=True), pod(), False, id="pulled without a login"
        ),
        pytest.param(PullCredentials(secrets=(REGCRED,)), pod(REGCRED), False, id="same secret"),
        pytest.param(PullCredentials(secrets=(REGCRED,)), pod(), True, id="no secret"),
        pytest.param(
            PullCredentials(secrets=(REGCRED,)),
            pod(SecretRef("default", "other", "uid-2", "hash-2")),
            True,
            id="another secret, another login",
        ),
        pytest.param(
            PullCredentials(secrets=(REGCRED,)),
            pod(SecretRef("other-ns", "regcred", "uid-1", "hash-1x")),
            True,
            id="same name and uid in another namespace",
        ),
        pytest.param(
            PullCredentials(secrets=(dataclasses.replace(REGCRED, credential_hash=""),)),
            pod(SecretRef("default", "other", "uid-2", "")),
            True,
            id="empty hashes never match",
        ),
        pytest.param(
            PullCredentials(service_accounts=(ACCOUNT,)),
            pod(account=ACCOUNT),
            False,
            id="same service account",
        ),
        pytest.param(
            PullCredentials(service_accounts=(ACCOUNT,)),
            pod(account=ServiceAccountRef("default", "builder", "recreated-uid")),
            True,
            id="a service account of the same name recreated",
        ),
        pytest.param(PullCredentials(), pod(REGCRED), True, id="a record naming nobody"),
    ],
)
async def test_a_present_image_serves_the_pods_its_record_allows(
    tmp_path: Path,
    creds: PullCredentials,
    pod_creds: tuple[list[SecretRef], ServiceAccountRef | None],
    must_pull: bool,
) -> None:
    seed(tmp_path, creds)
    assert await manager(tmp_path).must_attempt_pull(IMAGE, REF, Asked(pod_creds)) is must_pull


async def test_another_secret_with_the_same_login_is_let_in_and_remembered(
    tmp_path: Path,
) -> None:
    seed(tmp_path, PullCredentials(secrets=(REGCRED,)))
    copy = SecretRef("other-ns", "regcred-copy", "uid-9", "hash-1")
    assert not await manager(tmp_path).must_attempt_pull(IMAGE, REF, Asked(pod(copy)))
    assert stored(tmp_path).secrets == (REGCRED, copy)  # sorted by namespace, name, uid


async def test_the_same_secret_with_new_content_is_let_in_and_its_hash_updated(
    tmp_path: Path,
) -> None:
    seed(tmp_path, PullCredentials(secrets=(REGCRED,)))
    rotated = dataclasses.replace(REGCRED, credential_hash="hash-rotated")
    assert not await manager(tmp_path).must_attempt_pull(IMAGE, REF, Asked(pod(rotated)))
    assert stored(tmp_path).secrets == (rotated,)


async def test_past_the_write_limit_a_rotated_secret_must_pull(tmp_path: Path) -> None:
    """With 100 secrets on record the kubelet neither writes nor trusts a changed hash."""
    many = tuple(
        SecretRef("default", f"s{i:03d}", f"uid-{i}", f"h{i}")
        for i in range(WRITE_WHILE_MATCHING_LIMIT)
    )
    seed(tmp_path, PullCredentials(secrets=many))
    rotated = dataclasses.replace(many[5], credential_hash="new")
    assert await manager(tmp_path).must_attempt_pull(IMAGE, REF, Asked(pod(rotated)))
    assert not await manager(tmp_path).must_attempt_pull(IMAGE, REF, Asked(pod(many[5])))
    assert stored(tmp_path).secrets == many


@pytest.mark.parametrize(
    ("policy", "allowlist", "seeded", "intent", "must_pull"),
    [
        pytest.param(pullpolicy.NEVER_VERIFY, (), True, False, False, id="NeverVerify"),
        pytest.param(pullpolicy.ALWAYS_VERIFY, (), False, False, True, id="AlwaysVerify"),
        pytest.param(pullpolicy.NEVER_VERIFY_PRELOADED, (), False, False, False, id="preloaded"),
        pytest.param(
            pullpolicy.NEVER_VERIFY_PRELOADED, (), False, True, True, id="pull intent left"
        ),
        pytest.param(
            pullpolicy.NEVER_VERIFY_PRELOADED, (), True, False, True, id="pulled by the agent"
        ),
        pytest.param(
            pullpolicy.NEVER_VERIFY_ALLOWLISTED,
            (BARE,),
            True,
            False,
            False,
            id="allowlisted repository",
        ),
        pytest.param(
            pullpolicy.NEVER_VERIFY_ALLOWLISTED,
            ("registry.example.com/*",),
            True,
            False,
            False,
            id="allowlisted prefix",
        ),
        pytest.param(
            pullpolicy.NEVER_VERIFY_ALLOWLISTED,
            ("registry.example.com/other",),
            False,
            False,
            True,
            id="preloaded but not allowlisted",
        ),
    ],
)
async def test_the_verification_policy_decides_first(
    tmp_path: Path,
    *,
    policy: str,
    allowlist: tuple[str, ...],
    seeded: bool,
    intent: bool,
    must_pull: bool,
) -> None:
    if seeded:
        seed(tmp_path, PullCredentials(secrets=(REGCRED,)))
    if intent:
        PullRecords(tmp_path, now=Clock()).write_intent(IMAGE)
    asked = Asked(pod())
    got = await manager(tmp_path, policy, allowlist).must_attempt_pull(IMAGE, REF, asked)
    assert got is must_pull
    if not must_pull:
        assert asked.calls == 0  # the pod's secrets are not read when the policy lets it in


async def test_no_image_ref_or_a_record_for_another_name_must_pull(tmp_path: Path) -> None:
    seed(tmp_path, PullCredentials(node_pods_accessible=True), image="other.example.com/app")
    m = manager(tmp_path)
    assert await m.must_attempt_pull(IMAGE, "", Asked(pod()))
    assert await m.must_attempt_pull(IMAGE, REF, Asked(pod()))


async def test_a_corrupt_record_means_pull_again_and_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    records = seed(tmp_path, PullCredentials(node_pods_accessible=True))
    (records.pulled / cache_filename(REF)).write_bytes(b'{"kind":"ImagePulledRecord",')
    caplog.set_level(logging.INFO, logger="nodeagent.kuberuntime")
    assert await manager(tmp_path).must_attempt_pull(IMAGE, REF, Asked(pod()))
    assert "Unable to access cache records about image pulls" in caplog.text


async def test_a_pull_writes_its_intent_then_its_record_and_removes_the_intent(
    tmp_path: Path,
) -> None:
    m = manager(tmp_path)
    records = PullRecords(tmp_path, now=Clock())
    m.record_pull_intent(IMAGE)
    m.record_pull_intent(IMAGE)  # a second pod pulls the same image at once
    assert records.intents() == ([IMAGE], [])
    m.record_pull_failed(IMAGE)
    assert records.intents() == ([IMAGE], [])  # the other pull still runs
    m.record_pulled(IMAGE, REF, PullCredentials(secrets=(REGCRED,)))
    assert records.intents() == ([], [])
    assert stored(tmp_path).secrets == (REGCRED,)
    # A later anonymous pull opens the image to every pod; nothing narrows it again.
    m.record_pulled(IMAGE, REF, PullCredentials(node_pods_accessible=True))
    m.record_pulled(IMAGE, REF, PullCredentials(secrets=(REGCRED,)))
    assert stored(tmp_path) == PullCredentials(node_pods_accessible=True)


async def test_the_records_survive_a_restart(tmp_path: Path) -> None:
    first = manager(tmp_path)
    first.record_pull_intent(IMAGE)
    first.record_pulled(IMAGE, REF, PullCredentials(secrets=(REGCRED,)))

    again = manager(tmp_path)  # a new agent on the same root dir
    again.initialize([(REF, [IMAGE])])
    assert not await again.must_attempt_pull(IMAGE, REF, Asked(pod(REGCRED)))
    assert await again.must_attempt_pull(IMAGE, REF, Asked(pod()))


async def test_an_intent_left_by_a_crash_becomes_a_record_without_credentials(
    tmp_path: Path,
) -> None:
    crashed = manager(tmp_path)
    crashed.record_pull_intent(IMAGE)  # the agent died during the pull
    crashed.record_pull_intent("registry.example.com/gone:1")  # never finished

    again = manager(tmp_path)
    again.initialize([(REF, [IMAGE, f"{BARE}@sha256:{'b' * 64}"]), ("sha256:other", ["x:1"])])

    records = PullRecords(tmp_path, now=Clock())
    assert records.intents() == (["registry.example.com/gone:1"], [])
    record = records.pulled_record(REF)
    assert record is not None and record.credentials == {}
    # Pulled by the agent, but who may use it is unknown: every pod must pull it again.
    assert await again.must_attempt_pull(IMAGE, REF, Asked(pod(REGCRED)))


async def test_initialize_rewrites_older_records_and_skips_corrupt_intents(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    records = PullRecords(tmp_path, now=Clock())
    records.write_intent(IMAGE)
    path = records.pulling / cache_filename(IMAGE)
    path.write_text(path.read_text().replace("v1beta1", "v1alpha1"))
    (records.pulling / "sha256-broken").write_text("{")
    caplog.set_level(logging.INFO, logger="nodeagent.kuberuntime")

    manager(tmp_path).initialize([(REF, [IMAGE])])

    assert "there were errors listing ImagePullIntents" in caplog.text
    assert records.pulled_record(REF) is not None  # the good intent was still turned
    assert not path.exists()


async def test_pruning_removes_records_of_images_gone_before_the_gc_started(
    tmp_path: Path,
) -> None:
    clock = Clock()
    m = manager(tmp_path, clock=clock)
    m.record_pulled("a.example.com/gone:1", "sha256:gone", PullCredentials(secrets=(REGCRED,)))
    m.record_pulled("a.example.com/kept:1", "sha256:kept", PullCredentials(secrets=(REGCRED,)))
    clock.now = T0 + dt.timedelta(minutes=5, milliseconds=300)
    m.record_pulled("a.example.com/new:1", "sha256:new", None)  # pulled while GC listed
    records = PullRecords(tmp_path, now=clock)
    (records.pulled / "sha256-broken").write_text("{")

    removed = m.prune_unknown_records(
        ["sha256:kept"], until=T0 + dt.timedelta(minutes=5, milliseconds=100)
    )

    assert removed == ["sha256:gone"]
    found, errors = records.pulled_records()
    assert sorted(r.image_ref for r in found) == ["sha256:kept", "sha256:new"]
    assert len(errors) == 1  # a file that does not decode is left alone


async def test_a_record_written_in_the_second_pruning_started_is_kept(tmp_path: Path) -> None:
    """Records keep whole seconds: one written 0.2 s after ``until`` reads as earlier."""
    clock = Clock()
    clock.now = T0 + dt.timedelta(milliseconds=700)
    m = manager(tmp_path, clock=clock)
    m.record_pulled(IMAGE, REF, PullCredentials(secrets=(REGCRED,)))
    assert m.prune_unknown_records([], until=T0 + dt.timedelta(milliseconds=500)) == []


def test_the_record_mapping_is_keyed_by_the_image_without_tag_or_digest(tmp_path: Path) -> None:
    m = manager(tmp_path)
    m.record_pulled(f"{BARE}@sha256:{'c' * 64}", REF, PullCredentials(secrets=(REGCRED,)))
    data = json.loads((tmp_path / "image_manager" / "pulled" / cache_filename(REF)).read_text())
    assert list(data["credentialMapping"]) == [BARE]
