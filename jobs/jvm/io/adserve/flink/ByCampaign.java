package io.adserve.flink;

import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.typeinfo.BasicTypeInfo;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.java.typeutils.RowTypeInfo;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.functions.ProcessFunction;
import org.apache.flink.types.Row;
import org.apache.flink.util.Collector;
import org.apache.flink.util.OutputTag;

/**
 * The click aggregator's reduced rows, keyed by campaign shard in the JVM for its Python bill (jobs/click_aggregator).
 *
 * <p>PyFlink's own key_by runs a Python function over every row to extract the key: one Python operator more
 * for each of the aggregator's window rows (one per campaign and 10 s window). Here the rows that already
 * carry their campaign (windows, late events, late joins) get the key in the JVM; only the rows whose campaign
 * is inside their Avro bytes (campaign records, events of another contract version) go through Python to be
 * decoded, and come back to be keyed the same way.
 *
 * <p>The key is the campaign's shard ({@link #shard}: campaign id modulo the job's shard count), not the
 * campaign: PyFlink writes each key's changed state back to the JVM once per bundle and waits for the answer,
 * so a key per campaign cost a round trip per campaign and bundle; the bill keeps a shard's campaigns in one
 * map state. The keyed shape is PyFlink's: {@code Row(f0 = shard, f1 = row)}, partitioned by PyFlink's
 * KeyByKeySelector on f0 (applied by the caller), so a Python KeyedProcessFunction consumes it as if its own
 * key_by had made it. Event timestamps and watermarks pass unchanged.
 */
public final class ByCampaign {
    /** The row the bill reads; the caller's Python row type (click_aggregator.ROW_FIELDS) has these fields. */
    public static final String[] FIELDS = {"kind", "campaign_id", "billable", "impressions", "clicks", "invalid",
        "invalid_events", "joined", "topic", "part", "off", "k", "v", "event"};
    private static final TypeInformation<?> LONG = BasicTypeInfo.LONG_TYPE_INFO;
    private static final TypeInformation<?> STRING = BasicTypeInfo.STRING_TYPE_INFO;
    private static final TypeInformation<?> BYTES = PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO;
    public static final RowTypeInfo ROW = new RowTypeInfo(new TypeInformation<?>[] {STRING, LONG, LONG, LONG,
        LONG, LONG, LONG, LONG, STRING, BasicTypeInfo.INT_TYPE_INFO, LONG, BYTES, BYTES, STRING}, FIELDS);
    public static final RowTypeInfo KEYED = new RowTypeInfo(new TypeInformation<?>[] {LONG, ROW},
        new String[] {"f0", "f1"});
    static final OutputTag<Row> UNKEYED = new OutputTag<>("campaign inside the bytes", ROW);
    private static final int CAMPAIGN = 1;

    private ByCampaign() {
    }

    /** Rows with a campaign id: keyed rows out; the rest (`others`: campaign id NULL) to be decoded first. */
    public static SingleOutputStreamOperator<Row> split(DataStream<Row> reduced, Integer shards) {
        return reduced.process(new Split(shards), KEYED).name("key rows by campaign shard");
    }

    /** The rows `split` could not key: campaign records and events of another contract version. */
    public static DataStream<Row> others(SingleOutputStreamOperator<Row> split) {
        return split.getSideOutput(UNKEYED);
    }

    /** The keyed rows of `split` and the decoded others, keyed the same way, as one stream. */
    public static DataStream<Row> union(DataStream<Row> keyed, DataStream<Row> decoded, Integer shards) {
        return keyed.union(decoded.map(new WithKey(shards), KEYED).name("key decoded rows by campaign shard"));
    }

    /** The shard of a campaign: what the rows are keyed by. */
    public static long shard(long campaignId, int shards) {
        return Math.floorMod(campaignId, (long) shards);
    }

    static Row project(Row in) {
        Row out = new Row(FIELDS.length);
        for (int i = 0; i < FIELDS.length; i++) {
            out.setField(i, in.getField(i));
        }
        return out;
    }

    static final class Split extends ProcessFunction<Row, Row> {
        private final int shards;

        Split(int shards) {
            this.shards = shards;
        }

        @Override
        public void processElement(Row in, Context ctx, Collector<Row> out) {
            Row row = project(in);
            if (row.getField(CAMPAIGN) != null) {  // campaign records and raw events carry none yet
                out.collect(Row.of(shard((Long) row.getField(CAMPAIGN), shards), row));
            } else {
                ctx.output(UNKEYED, row);
            }
        }
    }

    static final class WithKey implements MapFunction<Row, Row> {
        private final int shards;

        WithKey(int shards) {
            this.shards = shards;
        }

        @Override
        public Row map(Row row) {
            return Row.of(shard((Long) row.getField(CAMPAIGN), shards), row);
        }
    }
}
