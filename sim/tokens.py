"""The token keys an in-process ad server and tracker sign and verify with: ADSERVE_TOKEN_KEYS as
'id1:secret1,id2:secret2' (the first signs, all verify, so keys rotate), or a fixed development key with a
warning. Shared by `adserve serve`, the simulators and the benchmarks so every process of one run agrees."""
from __future__ import annotations

import logging
import os

from core.tokens import TokenKeys

DEV_TOKEN_KEYS = "dev1:adserve-dev-token-key-change-me"
TOKEN_KEYS_HELP = ("Token keys come from ADSERVE_TOKEN_KEYS as 'id1:secret1,id2:secret2' (the first signs, all "
                   "verify, so keys rotate); without it a fixed development key is used and a warning logged.")


def token_keys_from_env(environ: dict[str, str] | None = None) -> TokenKeys:
    """The keys ADSERVE_TOKEN_KEYS names, or the development key (logged, since it is public)."""
    spec = (os.environ if environ is None else environ).get("ADSERVE_TOKEN_KEYS")
    if not spec:
        logging.getLogger("adserve").warning("ADSERVE_TOKEN_KEYS is not set: using the development key")
        spec = DEV_TOKEN_KEYS
    return TokenKeys.from_spec(spec)
