"""`adserve up`, `down` and `status`: the local platform on 127.0.0.1."""
from infra.platform.errors import PlatformError
from infra.platform.settings import PlatformSettings

__all__ = ["PlatformError", "PlatformSettings"]
