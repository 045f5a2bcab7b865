"""The ad server's and the tracker's settings: token keys only from the environment or development mode,
and never a secret in the line printed at start."""
from __future__ import annotations

import argparse

import pytest

from core.errors import AdserveError, InvalidSettings
from serving.adserver.settings import (DEVELOPMENT_TOKEN_KEYS, AdServerSettings, MissingTokenKeys, TrackerSettings,
                                       add_development_argument, token_keys_from)

PLATFORM = {"ADSERVE_KAFKA_BOOTSTRAP": "127.0.0.1:19092", "ADSERVE_HOST": "127.0.0.1", "ADSERVE_REDIS_PORT": "16379"}
SECRET = "production-secret-0123456789"


def ads_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8080)
    add_development_argument(parser)
    return parser.parse_args(argv)


def test_a_server_started_without_keys_refuses_to_start_and_says_how_to_give_one():
    with pytest.raises(MissingTokenKeys) as refused:
        AdServerSettings.from_args(ads_args(), PLATFORM)
    message = str(refused.value)
    assert "ADSERVE_TOKEN_KEYS" in message and "--dev" in message and "ADSERVE_DEV=1" in message
    assert isinstance(refused.value, InvalidSettings) and isinstance(refused.value, AdserveError)


def test_the_tracker_without_keys_refuses_to_start_too():
    with pytest.raises(MissingTokenKeys):
        TrackerSettings.from_args(ads_args(), PLATFORM)


@pytest.mark.parametrize("argv, environ", [(("--dev",), {}), ((), {"ADSERVE_DEV": "1"})])
def test_development_mode_signs_with_the_development_key(argv, environ):
    settings = AdServerSettings.from_args(ads_args(*argv), {**PLATFORM, **environ})
    assert settings.development
    assert settings.token_keys.active == DEVELOPMENT_TOKEN_KEYS.split(":")[0]


def test_keys_from_the_environment_win_over_the_development_key():
    keys = token_keys_from({"ADSERVE_TOKEN_KEYS": f"new:{SECRET},old:{SECRET}x"}, development=True)
    assert keys.active == "new" and set(keys.keys) == {"new", "old"}


def test_the_printed_settings_name_the_key_ids_but_never_a_secret():
    settings = AdServerSettings.from_args(ads_args(), {**PLATFORM, "ADSERVE_TOKEN_KEYS": f"k2:{SECRET},k1:{SECRET}1"})
    for printed in (settings.describe(), repr(settings), repr(settings.token_keys),
                    TrackerSettings.from_args(ads_args(), {**PLATFORM, "ADSERVE_TOKEN_KEYS": f"k2:{SECRET}"})
                    .describe()):
        assert SECRET not in printed
    assert "k2:***" in settings.describe() and "k1:***" in settings.describe()


def test_the_development_key_is_masked_too():
    settings = AdServerSettings.from_args(ads_args("--dev"), PLATFORM)
    assert DEVELOPMENT_TOKEN_KEYS.split(":")[1] not in settings.describe()


def test_a_missing_platform_address_names_the_variable():
    with pytest.raises(InvalidSettings, match="ADSERVE_REDIS_PORT"):
        AdServerSettings.from_args(ads_args("--dev"), {"ADSERVE_KAFKA_BOOTSTRAP": "h:1", "ADSERVE_HOST": "h"})


def test_flags_that_go_together_are_checked_before_the_server_starts():
    base = dict(kafka_bootstrap="h:1", redis_host="h", redis_port=1, token_keys=token_keys_from({}, development=True))
    with pytest.raises(InvalidSettings, match="--prerank-model goes with --prediction-url"):
        AdServerSettings(**base, prerank_model="m", ad_features="f")
    with pytest.raises(InvalidSettings, match="--ad-features"):
        AdServerSettings(**base, model="m")
