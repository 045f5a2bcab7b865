"""IdMap: the same answers in direct-address and sorted modes, and across the switch."""
import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from serving.decision.columns import IdMap


@settings(max_examples=100, deadline=None)
@given(bulk=st.lists(st.integers(0, 10**12), max_size=50, unique=True),
       later=st.lists(st.integers(-5, 10**12), max_size=50, unique=True), dense=st.booleans())
def test_id_map_answers_like_a_dict(bulk, later, dense):
    if dense:
        bulk = [x % 200 for x in bulk]
        bulk = list(dict.fromkeys(bulk))
        later = [x % 400 for x in later]
    expected = {key: row for row, key in enumerate(bulk)}
    ids = IdMap()
    ids.bulk(np.array(bulk, dtype=np.int64), np.arange(len(bulk)))
    for key in later:
        if key not in expected:
            expected[key] = len(expected)
            ids.put(key, expected[key])
    keys_asked = list(expected) + [random.randint(-10, 10**12) for _ in range(20)]
    assert [ids.get(k) for k in keys_asked] == [expected.get(k) for k in keys_asked]
    assert ids.get_many(np.array(keys_asked, dtype=np.int64)).tolist() == [expected.get(k, -1) for k in keys_asked]
    assert len(ids) == len(expected)
