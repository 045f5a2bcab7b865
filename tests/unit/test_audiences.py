"""Custom audiences' rules (core.audiences): normalising, the upload's hashes, the platform's salted keys, the
targeting value, and the key the ad servers read them from."""
from __future__ import annotations

import hashlib
import hmac

import pytest

from core.audiences import (AudienceSalt, audience_value, named_audience_ids, normalise_device_id,
                            normalise_email, parse_audience_name, parse_hash, parse_hashed_ids, request_member_keys,
                            salt_from, upload_hash, uploaded_audience_id)
from core.errors import BadRequest, InvalidField, InvalidSettings
from core.settings import describe
from core.targeting import InvalidTargeting, compile_targeting
from serving.adserver.request import parse_ad_request

SALT = AudienceSalt(b"unit-test-audience-salt-0123456789")
ABC_SHA256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  # FIPS 180-2's "abc"


def test_an_email_is_trimmed_and_lower_cased_and_nothing_else():
    assert normalise_email("  Jane.Doe+News@Example.COM \n") == "jane.doe+news@example.com"
    assert normalise_email("j.a.n.e@gmail.com") == "j.a.n.e@gmail.com"  # dots are kept, whatever the provider


@pytest.mark.parametrize("raw", ["jane.example.com", "@example.com", "jane@", "a@b@c", "jane doe@example.com"])
def test_a_string_that_is_no_email_is_refused(raw):
    with pytest.raises(InvalidField) as e:
        normalise_email(raw)
    assert e.value.field == "email"


def test_a_device_id_is_trimmed_and_lower_cased_with_its_hyphens_kept():
    assert normalise_device_id(" 6D92078A-8246-4BA4-AE5B-76104861E7DC ") == "6d92078a-8246-4ba4-ae5b-76104861e7dc"
    with pytest.raises(InvalidField):
        normalise_device_id("   ")


def test_the_upload_hash_is_the_sha256_in_lower_case_hex():
    assert upload_hash("abc") == ABC_SHA256


def test_an_upload_keeps_each_hash_once_lower_cased():
    assert parse_hashed_ids({"hashed_ids": [ABC_SHA256.upper(), ABC_SHA256, "0" * 64]}) == [ABC_SHA256, "0" * 64]


@pytest.mark.parametrize("body, field, words", [
    ({"hashed_ids": [ABC_SHA256, "jane@example.com"]}, "hashed_ids[1]", "clear email"),
    ({"hashed_ids": ["abc"]}, "hashed_ids[0]", "64 hex digits"),
    ({"hashed_ids": [ABC_SHA256[:-1] + "g"]}, "hashed_ids[0]", "64 hex digits"),
    ({"hashed_ids": [" " + ABC_SHA256]}, "hashed_ids[0]", "64 hex digits"),
    ({"hashed_ids": [12]}, "hashed_ids[0]", "64 hex digits"),
    ({"hashed_ids": []}, "hashed_ids", "1 to 10000"),
    ({"hashed_ids": ["0" * 64] * 10_001}, "hashed_ids", "1 to 10000"),
    ({"hashed_ids": ABC_SHA256}, "hashed_ids", "list"),
    ({"hashed_ids": [ABC_SHA256], "emails": ["jane@example.com"]}, "emails", "not a field"),
    (["0" * 64], "body", "JSON object"),
])
def test_an_upload_that_is_not_only_hashes_is_refused_naming_the_field(body, field, words):
    with pytest.raises(InvalidField) as e:
        parse_hashed_ids(body)
    assert e.value.field == field and words in str(e.value)


def test_an_audience_name_is_required_and_trimmed():
    assert parse_audience_name({"name": "  newsletter  "}) == "newsletter"
    for body, field in (({}, "name"), ({"name": " "}, "name"), ({"name": "x" * 201}, "name"),
                        ({"name": "n", "members": []}, "members")):
        with pytest.raises(InvalidField) as e:
            parse_audience_name(body)
        assert e.value.field == field


def test_the_stored_key_is_the_uploaded_hash_keyed_with_the_salt():
    key = SALT.member_key(ABC_SHA256)
    assert key == hmac.new(b"unit-test-audience-salt-0123456789", bytes.fromhex(ABC_SHA256),
                           hashlib.sha256).hexdigest()
    assert key != ABC_SHA256 and len(key) == 64
    assert AudienceSalt(b"another-salt-of-the-platform-xyz").member_key(ABC_SHA256) != key


def test_the_salt_never_prints():
    from dataclasses import dataclass

    @dataclass
    class Settings:
        audience_salt: AudienceSalt

    assert describe(Settings(SALT)) == "audience_salt=***"
    assert "unit-test" not in repr(SALT) and "unit-test" not in str(SALT)


def test_a_short_salt_is_refused_and_development_mode_alone_gets_the_public_one():
    with pytest.raises(InvalidSettings):
        AudienceSalt(b"short")
    env_salt = salt_from({"ADSERVE_AUDIENCE_SALT": "a-salt-set-by-the-operator"}, development=False)
    assert env_salt is not None and env_salt.member_key(ABC_SHA256) == \
        AudienceSalt(b"a-salt-set-by-the-operator").member_key(ABC_SHA256)
    assert salt_from({}, development=False) is None
    assert salt_from({}, development=True) is not None


def test_a_request_matches_on_its_normalised_device_id_and_its_email_hash():
    device = "6D92078A-8246-4BA4-AE5B-76104861E7DC"
    email_hash = upload_hash(normalise_email("Jane@Example.com"))
    keys = request_member_keys(SALT, device_id=device, email_sha256=email_hash)
    assert len(request_member_keys(SALT, device_id=" odd id ", email_sha256=None)) == 1  # any shape, no error
    assert keys == [SALT.member_key(upload_hash(device.lower())), SALT.member_key(email_hash)]
    assert request_member_keys(SALT, device_id=None, email_sha256=None) == []


def test_a_request_carries_an_email_only_as_its_hash():
    body = {"placement": "feed", "slots": [{"position": 1}], "email_sha256": ABC_SHA256.upper(),
            "device_id": "d-1", "user_id": "u-1"}
    request = parse_ad_request(body)
    assert (request.email_sha256, request.device_id, request.user_id) == (ABC_SHA256, "d-1", "u-1")
    assert parse_ad_request({**body, "user_id": None}).user_id == "d-1"  # the device id keys the profile
    with pytest.raises(BadRequest) as e:
        parse_ad_request({**body, "email_sha256": "jane@example.com"})
    assert e.value.field == "email_sha256" and "clear email" in str(e.value)


def test_an_uploaded_audience_is_targeted_as_aud_and_its_id():
    assert audience_value(12) == "aud-12" and uploaded_audience_id("aud-12") == 12
    assert uploaded_audience_id("existing-customers") is None  # an audience the profile system assigns
    assert named_audience_ids({"audience": ["aud-3", "newsletter"], "exclude": {"audience": ["aud-4"]}}) == {3, 4}
    assert compile_targeting({"audience": ["aud-3"]}).include["audience"] == frozenset({"aud-3"})


@pytest.mark.parametrize("form, field", [({"audience": ["aud-x"]}, "audience"),
                                         ({"exclude": {"audience": ["aud-0"]}}, "exclude.audience"),
                                         ({"audience": [f"aud-{2**63}"]}, "audience")])
def test_a_malformed_uploaded_audience_value_is_refused_naming_the_field(form, field):
    with pytest.raises(InvalidTargeting) as e:
        compile_targeting(form)
    assert e.value.field == field and "aud-<audience_id>" in str(e.value)


def test_a_hash_is_checked_without_trimming():
    assert parse_hash("A" * 64, "f") == "a" * 64
    with pytest.raises(InvalidField):
        parse_hash("a" * 64 + "\n", "f")


def test_an_audience_is_matched_only_from_its_minimum_size_and_redis_follows_each_change():
    from core.audiences import MIN_AUDIENCE_MEMBERS as MIN, matching_change

    assert matching_change(False, MIN - 1, removing=False) == "none"  # too small: stored, matched by nobody
    assert matching_change(False, MIN, removing=False) == "link_all"  # reached the minimum: everyone at once
    assert matching_change(True, MIN + 5, removing=False) == "link_upload"
    assert matching_change(True, MIN, removing=True) == "unlink_upload"
    assert matching_change(True, MIN - 1, removing=True) == "unlink_all"  # fell under it: nobody matches
    assert matching_change(True, 3, removing=False) == "unlink_all"  # one matched before the minimum existed
    assert matching_change(False, MIN + 1, removing=True) == "link_all"  # a link that failed, finished now


def test_an_upload_past_the_advertisers_member_quota_is_refused_naming_hashed_ids():
    from core.audiences import MAX_MEMBERS_PER_ADVERTISER, check_member_quota

    check_member_quota(MAX_MEMBERS_PER_ADVERTISER - 10, 10)
    with pytest.raises(InvalidField) as e:
        check_member_quota(MAX_MEMBERS_PER_ADVERTISER - 10, 11)
    assert e.value.field == "hashed_ids" and "MAX_MEMBERS_PER_ADVERTISER" in str(e.value)
