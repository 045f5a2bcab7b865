"""The Flink function of `index_builder`: Compile turns one row's change into its serving record
(schemas.cdc.serving_record_from_change, over core.campaigns.compile_change) and emits it only when its
version is newer than the row's last one; it never reads Kafka itself and never writes snapshots
(serving.snapshots does, in its own process)."""
from __future__ import annotations

from pyflink.common import Row, Types
from pyflink.datastream import KeyedProcessFunction, OutputTag, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor

from core.campaigns import BadChange
from schemas.cdc import serving_record_from_change
from core.dead_letters import SourcePosition, dead_letter
from core.errors import SchemaMismatch
from core.versions import is_newer
from jobs.common.dead_letters import dead_letter_row
from jobs.common.kafka_tables import bytes_row_type
from jobs.common.routing import DEAD_LETTERS
from schemas import topics
from schemas.codec import AvroCodec

JOB_NAME = "index_builder"
CAMPAIGNS = OutputTag("campaigns", bytes_row_type())
RESERVES = OutputTag("reserves", bytes_row_type())
SIDE_OUTPUTS = {topics.SERVING_CAMPAIGNS: CAMPAIGNS, topics.SERVING_RESERVES: RESERVES}  # serving.ads: the main
EMITTED_VERSION = ValueStateDescriptor("emitted_version", Types.LONG())  # the row's newest version emitted


def change_key(row) -> str:
    """A change's key: its source topic and row key (one row's changes in commit order)."""
    return f"{row.topic}|{bytes(row.k or b'').decode('utf-8', 'replace')}"


class Compile(KeyedProcessFunction):
    """Per row (topic, key): compile the change; newer versions out, bad changes (not a change envelope, a row
    that does not compile, or a compiled record that does not fit its serving schema) to dead letters (counted,
    `bad_changes`), older or repeated versions dropped (counted, `stale_changes`)."""

    def open(self, runtime_context: RuntimeContext):
        self.codec = AvroCodec()
        self.emitted = runtime_context.get_state(EMITTED_VERSION)
        metrics = runtime_context.get_metrics_group()
        self.bad, self.stale = metrics.counter("bad_changes"), metrics.counter("stale_changes")

    def process_element(self, row, ctx):
        try:
            change = serving_record_from_change(row.topic, row.v)
            if change is None:
                return
            serving_topic, key, record_type, record = change
            if not is_newer(record["version"], self.emitted.value()):
                self.stale.inc()
                return
            out = Row(key.encode(), self.codec.encode(record_type, record))
        except (BadChange, SchemaMismatch) as error:
            self.bad.inc()
            yield DEAD_LETTERS, dead_letter_row(dead_letter(
                JOB_NAME, SourcePosition(row.topic, row.partition, row.offset), timestamp_ms=None, key=row.k,
                value=row.v, reason=str(error), error_type=type(error).__name__), self.codec)
            return
        self.emitted.update(record["version"])
        yield (SIDE_OUTPUTS[serving_topic], out) if serving_topic in SIDE_OUTPUTS else out
