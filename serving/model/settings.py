"""Typed settings of the prediction service (`adserve serve prediction`), built from its flags and printed
once at start (core.settings.describe). The service holds no secret and reads no platform address: it serves
the model and the ad-feature snapshot folder it is given."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import InvalidSettings
from core.settings import describe
from serving.model.service import DEFAULT_PORT, ServiceConfig


@dataclass(frozen=True)
class PredictionServiceSettings:
    """The model, its candidate on a canary share, where the service listens and how it batches."""

    model_dir: Path
    ad_features_dir: Path
    canary_model_dir: Path | None = None
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    service: ServiceConfig = field(default_factory=ServiceConfig)

    def __post_init__(self) -> None:
        if not 0.0 <= self.service.canary_share <= 1.0:
            raise InvalidSettings(f"--canary-share must be in [0, 1], got {self.service.canary_share}")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "PredictionServiceSettings":
        """The flags of `adserve serve prediction`; the canary share counts only with a --canary-model."""
        service = ServiceConfig(max_wait_ms=args.max_wait_ms, max_batch_rows=args.max_batch_rows,
                                canary_share=args.canary_share if args.canary_model else 0.0,
                                snapshot_refresh_s=args.snapshot_refresh_s)
        return cls(model_dir=Path(args.model), ad_features_dir=Path(args.ad_features),
                   canary_model_dir=Path(args.canary_model) if args.canary_model else None,
                   host=args.host, port=args.port, service=service)

    def describe(self) -> str:
        """The settings as one line: printed once at start."""
        return describe(self)


def service_config(args: argparse.Namespace) -> ServiceConfig:
    """The batching flags of `adserve serve prediction` for a service that follows the model registry: the
    registry names its canary and share, and its feature snapshots (no folder of its own is polled)."""
    return ServiceConfig(max_wait_ms=args.max_wait_ms, max_batch_rows=args.max_batch_rows, canary_share=0.0,
                         snapshot_refresh_s=0.0)
