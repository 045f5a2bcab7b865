"""Every Redis key format as a literal: the formats are a contract between processes (docs/storage.md)."""
from __future__ import annotations

from streams import redis_keys


def test_a_campaigns_pacing_hash_is_pacing_colon_its_id():
    assert redis_keys.pacing(42) == "pacing:42"


def test_a_pacing_minute_field_is_zero_padded_so_fields_sort_in_time_order():
    assert redis_keys.pacing_minute_field(7) == "m:0007"
    assert redis_keys.pacing_minute_field(1439) == "m:1439"
    assert sorted(redis_keys.pacing_minute_field(m) for m in (600, 7, 61)) == ["m:0007", "m:0061", "m:0600"]


def test_a_pacing_field_names_its_minute_and_other_fields_name_none():
    assert redis_keys.pacing_minute_of("m:0061") == 61
    assert redis_keys.pacing_minute_of("target_micros") is None


def test_a_users_profile_is_user_colon_the_id():
    assert redis_keys.user_profile("u-123") == "user:u-123"


def test_a_users_frequency_record_is_fc_colon_the_id():
    assert redis_keys.frequency_record("u-123") == "fc:u-123"


def test_the_membership_key_format():
    assert redis_keys.audience_member("ab" * 32) == "audiences:" + "ab" * 32
