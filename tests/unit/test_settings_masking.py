"""Settings printed at start (core.settings.describe): secrets masked by name, by value or inside a DSN."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from core.settings import describe, masked
from core.tokens import TokenKeys
from infra.platform.settings import PlatformSettings
from serving.advertiser.api import AdvertiserApiSettings
from serving.model.settings import PredictionServiceSettings

PASSWORD = "hunter2-database-password"


@dataclass(frozen=True)
class Inner:
    api_key: str = "ak_live_secret"
    region: str = "eu"


@dataclass(frozen=True)
class Outer:
    name: str = "svc"
    inner: Inner = field(default_factory=Inner)


def test_a_field_named_like_a_secret_is_masked():
    assert masked("api_key", "ak_live_secret") == "***"
    assert masked("db_password", "x") == "***"
    assert masked("region", "eu") == "eu"


def test_nested_settings_are_flattened_with_their_secrets_masked():
    assert describe(Outer()) == "name=svc, inner.api_key=***, inner.region=eu"


def test_a_url_or_dsn_keeps_its_host_but_not_its_password():
    assert masked("postgres_dsn", f"postgresql://adserve:{PASSWORD}@db:5432/adserve") == \
        "postgresql://adserve:***@db:5432/adserve"
    assert masked("postgres_dsn", f"host=db password={PASSWORD} dbname=adserve") == \
        "host=db password=*** dbname=adserve"


def test_a_url_with_a_password_and_no_user_keeps_its_host_but_not_its_password():
    assert masked("redis_url", f"redis://:{PASSWORD}@cache:6379/0") == "redis://:***@cache:6379/0"
    assert masked("redis_url", "redis://cache:6379/0") == "redis://cache:6379/0"


def test_token_keys_print_their_ids_only():
    keys = TokenKeys({"k1": b"signing-secret-0123456789"}, active="k1")
    assert masked("token_keys", keys) == "k1:*** (k1 signs)"


def test_the_advertiser_api_never_prints_the_database_password():
    settings = AdvertiserApiSettings.from_args(argparse.Namespace(port=8082), {
        "ADSERVE_POSTGRES_DSN": f"host=127.0.0.1 port=15432 user=adserve password={PASSWORD} dbname=adserve"})
    assert PASSWORD not in settings.describe() and "host=127.0.0.1" in settings.describe()


def test_the_platform_exports_the_addresses_the_services_read():
    platform = PlatformSettings.from_env({"ADSERVE_HOME": "/tmp/p", "ADSERVE_KAFKA_PORT": "29092"})
    env = platform.as_env()
    assert env["ADSERVE_KAFKA_BOOTSTRAP"] == "127.0.0.1:29092"
    assert AdvertiserApiSettings.from_args(argparse.Namespace(port=1), env).postgres_dsn == platform.postgres_dsn
    assert "kafka_port=29092" in platform.describe()


def test_the_prediction_service_settings_count_a_canary_share_only_with_a_candidate():
    args = argparse.Namespace(model="models/click-v3", ad_features="features", canary_model=None, canary_share=0.2,
                              host="127.0.0.1", port=8090, max_wait_ms=1.0, max_batch_rows=3200,
                              snapshot_refresh_s=300.0)
    assert PredictionServiceSettings.from_args(args).service.canary_share == 0.0
    args.canary_model = "models/click-v4"
    settings = PredictionServiceSettings.from_args(args)
    assert settings.service.canary_share == 0.2 and settings.canary_model_dir == Path("models/click-v4")
    assert "service.canary_share=0.2" in settings.describe()
