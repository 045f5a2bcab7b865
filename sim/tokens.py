"""The token keys of the simulators' and benchmarks' in-process ad servers and trackers: they run in
development mode explicitly, so ADSERVE_TOKEN_KEYS when set, else the public development key
(serving.adserver.settings owns the rule). Shared so every process of one run agrees."""
from __future__ import annotations

import os
from typing import Mapping

from core.tokens import TokenKeys
from serving.adserver.settings import token_keys_from


def token_keys_from_env(environ: Mapping[str, str] | None = None) -> TokenKeys:
    """The keys ADSERVE_TOKEN_KEYS names, or the development key (logged, since it is public)."""
    return token_keys_from(os.environ if environ is None else environ, development=True)
