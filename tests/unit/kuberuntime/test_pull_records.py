"""The pull records on disk, in the kubelet's file format (its ``fsPullRecordsAccessor``):
names, bytes, versions, modes, and files that are corrupt or not what they claim."""

from __future__ import annotations

import datetime as dt
import logging
import os
import stat
from pathlib import Path

import pytest

from nodeagent.kuberuntime.pullrecords import (
    PullCredentials,
    PulledRecord,
    PullRecords,
    RecordError,
    SecretRef,
    ServiceAccountRef,
    cache_filename,
    decode_intent,
    decode_record,
    encode_intent,
    encode_record,
)

WHEN = dt.datetime(2026, 11, 27, 12, 26, 40, 750000, tzinfo=dt.UTC)
IMAGE = "127.0.0.1:5000/private/busybox:1"
REF = "sha256:" + "1" * 64
# sha256 of IMAGE and of REF, as `printf %s ... | sha256sum` prints them.
IMAGE_FILE = "sha256-9a81b823ee80b98301dccf702780434eda9a159a8e811ca6dee600b2736b9801"
REF_FILE = "sha256-5d4cc820b37f3d1fd0c6e04ed50a56ead8d497ecfd3c25c749855ed9d852837d"

# The kubelet's encoder (k8s.io/apimachinery's JSON serializer over the v1beta1 types, whose
# fields are declared in this order) writes compact JSON and a newline; map keys sorted.
KUBELET_RECORD = (
    '{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1",'
    '"lastUpdatedTime":"2026-11-27T12:26:40Z","imageRef":"' + REF + '",'
    '"credentialMapping":{'
    '"127.0.0.1:5000/private/busybox":{"kubernetesSecrets":[{"uid":"u1","namespace":"default",'
    '"name":"regcred","credentialHash":"h1"}]},'
    '"127.0.0.1:5000/public/busybox":{"nodePodsAccessible":true},'
    '"127.0.0.1:5000/sa/busybox":{"kubernetesServiceAccounts":[{"uid":"sa1",'
    '"namespace":"team","name":"builder"}]}}}\n'
)
KUBELET_INTENT = (
    '{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1beta1","image":"'
    + IMAGE
    + '"}\n'
)


def record() -> PulledRecord:
    return PulledRecord(
        image_ref=REF,
        last_updated=WHEN,
        credentials={
            "127.0.0.1:5000/sa/busybox": PullCredentials(
                service_accounts=(ServiceAccountRef("team", "builder", "sa1"),)
            ),
            "127.0.0.1:5000/private/busybox": PullCredentials(
                secrets=(SecretRef("default", "regcred", "u1", "h1"),)
            ),
            "127.0.0.1:5000/public/busybox": PullCredentials(node_pods_accessible=True),
        },
    )


def test_files_are_named_by_the_sha256_of_the_image_or_its_ref() -> None:
    assert cache_filename(IMAGE) == IMAGE_FILE
    assert cache_filename(REF) == REF_FILE


def test_a_record_is_written_byte_for_byte_as_the_kubelet_writes_it() -> None:
    assert encode_record(record()).decode() == KUBELET_RECORD
    assert encode_intent(IMAGE).decode() == KUBELET_INTENT


def test_a_record_the_kubelet_wrote_reads_back_whole() -> None:
    got = decode_record(KUBELET_RECORD.encode())
    assert got.image_ref == REF
    assert got.last_updated == WHEN.replace(microsecond=0)
    assert got.credentials == record().credentials
    assert decode_intent(KUBELET_INTENT.encode()) == IMAGE


def test_records_land_in_the_kubelets_directories_private_to_root(tmp_path: Path) -> None:
    records = PullRecords(tmp_path, now=lambda: WHEN)
    records.write_intent(IMAGE)
    records.write_pulled(record())

    base = tmp_path / "image_manager"
    assert (base / "pulling" / IMAGE_FILE).read_text() == KUBELET_INTENT
    assert (base / "pulled" / REF_FILE).read_text() == KUBELET_RECORD
    for directory in (base / "pulling", base / "pulled"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        for file in directory.iterdir():
            assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert not list(base.rglob("*.tmp"))


def test_the_older_version_is_read_and_rewritten_in_the_current_one(tmp_path: Path) -> None:
    records = PullRecords(tmp_path, now=lambda: WHEN)
    records.write_intent("placeholder")  # makes the directories
    alpha_record = KUBELET_RECORD.replace("v1beta1", "v1alpha1")
    alpha_intent = KUBELET_INTENT.replace("v1beta1", "v1alpha1")
    (records.pulled / REF_FILE).write_text(alpha_record)
    (records.pulling / IMAGE_FILE).write_text(alpha_intent)
    assert records.pulled_record(REF) == decode_record(KUBELET_RECORD.encode())

    assert records.migrate() == []

    assert (records.pulled / REF_FILE).read_text() == KUBELET_RECORD
    assert (records.pulling / IMAGE_FILE).read_text() == KUBELET_INTENT


@pytest.mark.parametrize(
    ("content", "error"),
    [
        pytest.param(b"", "not JSON", id="empty"),
        pytest.param(KUBELET_RECORD[:80].encode(), "not JSON", id="cut short"),
        pytest.param(b"\xff\xfe", "not JSON", id="not UTF-8"),
        pytest.param(b"[]", "not an ImagePulledRecord", id="not an object"),
        pytest.param(
            KUBELET_INTENT.encode(), "not an ImagePulledRecord", id="an intent in pulled/"
        ),
        pytest.param(
            KUBELET_RECORD.replace("v1beta1", "v9").encode(), "unknown apiVersion", id="version"
        ),
        pytest.param(
            KUBELET_RECORD.replace('"imageRef"', '"imageRev"').encode(), "no imageRef", id="ref"
        ),
        pytest.param(
            b'{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1",'
            b'"imageRef":"r","credentialMapping":[]}',
            "credentialMapping is not an object",
            id="mapping a list",
        ),
        pytest.param(
            KUBELET_RECORD.replace('"name":"regcred"', '"name":7').encode(),
            "not a string",
            id="secret name a number",
        ),
    ],
)
def test_a_corrupt_record_is_an_error_never_an_empty_record(content: bytes, error: str) -> None:
    with pytest.raises(RecordError, match=error):
        decode_record(content)


def test_listing_skips_what_is_not_a_record_and_reports_what_does_not_decode(
    tmp_path: Path,
) -> None:
    records = PullRecords(tmp_path, now=lambda: WHEN)
    records.write_pulled(record())
    (records.pulled / "sha256-broken").write_text("{not json")
    (records.pulled / "sha256-half.tmp").write_text("{")  # a write cut short: not a record
    (records.pulled / "README").write_text("not a record")
    (records.pulled / "sha256-adir").mkdir()

    found, errors = records.pulled_records()

    assert [r.image_ref for r in found] == [REF]
    assert len(errors) == 2, errors
    assert any("sha256-broken" in e and "deserialize" in e for e in errors)
    assert any("sha256-adir" in e for e in errors)


def test_a_record_filed_under_another_refs_name_is_not_that_refs(tmp_path: Path) -> None:
    records = PullRecords(tmp_path, now=lambda: WHEN)
    records.write_pulled(record())
    os.rename(records.pulled / REF_FILE, records.pulled / cache_filename("sha256:other"))
    assert records.pulled_record("sha256:other") is None


def test_links_planted_in_the_record_directories_are_not_followed(tmp_path: Path) -> None:
    records = PullRecords(tmp_path, now=lambda: WHEN)
    records.write_intent("placeholder")
    target = tmp_path / "elsewhere"
    target.write_text(KUBELET_RECORD)
    (records.pulled / REF_FILE).symlink_to(target)
    with pytest.raises(OSError):
        records.pulled_record(REF)
    # A link planted where the write puts its temporary file is removed, never written
    # through: the intent is recorded and the link's target is untouched.
    planted = records.pulling / f".{IMAGE_FILE}.tmp"
    planted.symlink_to(target)
    records.write_intent(IMAGE)
    images, errors = records.intents()
    assert (sorted(images), errors) == (sorted(["placeholder", IMAGE]), [])
    assert not planted.is_symlink()
    assert target.read_text() == KUBELET_RECORD


def test_deleting_what_is_not_there_is_fine(tmp_path: Path) -> None:
    records = PullRecords(tmp_path, now=lambda: WHEN)
    records.delete_intent(IMAGE)
    records.delete_pulled(REF)
    assert records.pulled_records() == ([], [])
    assert records.intents() == ([], [])


def test_a_migration_that_cannot_decode_a_file_names_it_and_leaves_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    records = PullRecords(tmp_path, now=lambda: WHEN)
    records.write_intent("placeholder")
    (records.pulled / REF_FILE).write_text("garbage")
    [error] = records.migrate()
    assert REF_FILE in error
    assert (records.pulled / REF_FILE).read_text() == "garbage"
