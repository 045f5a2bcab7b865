"""An ad's content embedding: a hashed bag of the words of its creative reference, its landing page's host
and path, and its category, in a fixed width, L2-normalised. It gives a new ad without traffic a content
signal (the design's "its prediction comes from content and advertiser features") and the same ad the same
vector on every machine and in every snapshot. Pure: no I/O, no randomness but a fixed hash."""
from __future__ import annotations

import hashlib
import math
import re
from urllib.parse import urlsplit

EMBEDDING_DIM = 16
_WORD = re.compile(r"[a-z0-9]+")


def content_tokens(creative_ref: str, landing_url: str, category: int) -> list[str]:
    """The tokens the embedding hashes, each tagged with where it came from (a word of the creative and the
    same word in the URL path are different tokens)."""
    url = urlsplit(landing_url.strip() if "//" in landing_url else f"//{landing_url.strip()}")
    host = (url.hostname or "").lower()
    if host.startswith("www."):
        host = host[4:]
    tokens = [f"creative:{w}" for w in _WORD.findall(creative_ref.lower())]
    if host:
        tokens.append(f"host:{host}")
    tokens.extend(f"path:{w}" for w in _WORD.findall(url.path.lower()))
    tokens.append(f"category:{int(category)}")
    return tokens


def _slot(token: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
    number = int.from_bytes(digest, "big")
    return number % dim, 1.0 if (number >> 32) & 1 else -1.0


def content_embedding(creative_ref: str, landing_url: str, category: int, dim: int = EMBEDDING_DIM) -> list[float]:
    """The ad's embedding: each token adds +-1 to one of `dim` entries (the feature-hashing trick, a sign per
    token so collisions cancel rather than pile up), then the vector is scaled to length 1 (all zeros when the
    tokens cancel out exactly)."""
    vector = [0.0] * dim
    for token in content_tokens(creative_ref, landing_url, category):
        at, sign = _slot(token, dim)
        vector[at] += sign
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector] if norm > 0 else vector
