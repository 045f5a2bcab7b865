"""Campaign shards: a job's Python operator keys campaigns by campaign id modulo a shard count that is fixed
for the life of its state; the JVM (jobs/jvm/io/adserve/flink/ByCampaign) does the keying."""
from __future__ import annotations

from typing import Any

from core.errors import ShardCountChanged
from jobs.common.settings import option


def shards_option(default: int, operator: str) -> Any:
    """The --shards setting: how many keys a job's Python `operator` groups its campaigns into."""
    return option(default, f"the {operator}'s keys: campaigns are grouped by campaign id modulo this (default "
                           f"{default}); bounds the {operator}'s parallelism, and is fixed for the life of the "
                           "job's state (a restore with another count fails)")


def check_shards(job: str, stored: int | None, configured: int) -> None:
    """Raise ShardCountChanged when a shard's state was written with another shard count than `configured`
    (None: a fresh shard). The count is fixed for the life of a job's state, like its max parallelism."""
    if stored is not None and stored != configured:
        raise ShardCountChanged(job, stored, configured)


def by_campaign_shard(rows, row_type, shards: int, route, route_name: str):
    """(routed, keyed): `rows` (a DataStream of the reduced view's rows) keyed by campaign shard in the JVM
    (jobs/jvm/io/adserve/flink/ByCampaign), as rows of `row_type` (a Types.ROW_NAMED whose fields the view
    has, with a `campaign_id`). `keyed` is a KeyedStream for a Python KeyedProcessFunction whose key is the
    shard: PyFlink's own key_by would run a Python function per row.

    Rows with a campaign id are keyed where they stand. `route` is a Python ProcessFunction that decodes the
    rest (campaign id NULL: records the JVM could not read) into rows of `row_type` with their campaign, or
    sends them to a side output; those come back a bundle or so later, so they may be overtaken by rows that
    came after them. A record whose order matters (a campaign's budget before the spend behind it) must
    therefore get its campaign id in the JVM (jobs/jvm/LeadingCampaignId)."""
    from pyflink.common import Types
    from pyflink.datastream import DataStream
    from pyflink.datastream.data_stream import KeyedStream
    from pyflink.java_gateway import get_gateway
    from pyflink.util.java_utils import invoke_method

    by_campaign, row_info = "io.adserve.flink.ByCampaign", row_type.get_java_type_info()
    stream = "org.apache.flink.streaming.api.datastream.DataStream"
    operator = "org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator"
    row_class, text, number = "org.apache.flink.api.java.typeutils.RowTypeInfo", "java.lang.String", "java.lang.Integer"
    split = invoke_method(None, by_campaign, "split", [rows._j_data_stream, row_info, "campaign_id", shards],
                          [stream, row_class, text, number])
    others = invoke_method(None, by_campaign, "others", [split, row_info], [operator, row_class])
    routed = DataStream(others).process(route, output_type=row_type).name(route_name)
    keyed_rows = invoke_method(None, by_campaign, "union",
                               [split, routed._j_data_stream, row_info, "campaign_id", shards],
                               [stream, stream, row_class, text, number])
    key_type = Types.ROW([Types.LONG()]).get_java_type_info()
    return routed, KeyedStream(keyed_rows.keyBy(get_gateway().jvm.KeyByKeySelector(), key_type), row_type, routed)
