"""`adserve explain` on the real ad.served topic (a fresh one): it decodes only the asked request's records
(another request's record there is not even valid Avro) and explains the design's example price."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from schemas import topics
from schemas.codec import AvroCodec
from streams import kafka
from tests.served_records import T0, design_example


def test_explain_reads_the_topic_and_decodes_only_the_requests_records(platform, fresh_topics):
    (topic,) = fresh_topics("served", partitions=2)
    record = design_example()
    kafka.produce_all(platform.kafka_bootstrap, topic, [
        (b"r0", b"not decoded: another request", T0),
        (record["request_id"].encode(), AvroCodec().encode(topics.record_type(topics.AD_SERVED), record), T0)])
    done = subprocess.run([sys.executable, "-m", "adserve", "explain", f"{record['request_id']}:1", "--topic", topic],
                          capture_output=True, text=True, timeout=120, env=os.environ | platform.as_env(),
                          cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "paid $1.40 per click" in done.stdout
