"""The ad's content embedding (core.ad_content): deterministic, unit length, and different for different words."""
from __future__ import annotations

import math

import pytest

from core.ad_content import EMBEDDING_DIM, content_embedding, content_tokens


def test_the_same_ad_gets_the_same_vector():
    first = content_embedding("creatives/summer-shoes-01.png", "https://shop.example.com/shoes/summer", 3)
    again = content_embedding("creatives/summer-shoes-01.png", "https://shop.example.com/shoes/summer", 3)
    assert first == again


def test_the_vector_has_the_fixed_width_and_unit_length():
    vector = content_embedding("c/1.png", "https://example.com/a", 0)
    assert len(vector) == EMBEDDING_DIM
    assert math.sqrt(sum(v * v for v in vector)) == pytest.approx(1.0)


@pytest.mark.parametrize("other", [
    ("creatives/winter-coats-01.png", "https://shop.example.com/shoes/summer", 3),
    ("creatives/summer-shoes-01.png", "https://other-shop.test/shoes/summer", 3),
    ("creatives/summer-shoes-01.png", "https://shop.example.com/coats/winter", 3),
    ("creatives/summer-shoes-01.png", "https://shop.example.com/shoes/summer", 4),
])
def test_different_words_give_a_different_vector(other):
    base = content_embedding("creatives/summer-shoes-01.png", "https://shop.example.com/shoes/summer", 3)
    assert content_embedding(*other) != base


def test_tokens_are_the_creatives_words_the_landing_host_and_path_and_the_category():
    assert content_tokens("cr/Summer_Shoes.png", "https://www.Shop.example.com/shoes/summer?utm=1", 7) == [
        "creative:cr", "creative:summer", "creative:shoes", "creative:png", "host:shop.example.com",
        "path:shoes", "path:summer", "category:7"]


def test_a_landing_url_without_a_scheme_still_gives_its_host():
    assert "host:example.com" in content_tokens("c", "example.com/x", 0)
