package io.adserve.flink;

import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.typeinfo.BasicTypeInfo;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.java.typeutils.RowTypeInfo;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.functions.ProcessFunction;
import org.apache.flink.types.Row;
import org.apache.flink.util.Collector;
import org.apache.flink.util.OutputTag;

/**
 * A job's reduced rows, keyed by campaign shard in the JVM for a Python KeyedProcessFunction (the click
 * aggregator's bill, the budget job's pacer).
 *
 * <p>PyFlink's own key_by runs a Python function over every row to extract the key: one Python operator more
 * for each reduced row. Here the rows that already carry their campaign get the key in the JVM (campaign and
 * billing records carry it too: {@link LeadingCampaignId} reads it); only the rows whose campaign the JVM could
 * not read (late or undecodable events, records of another contract version) go through Python to be decoded,
 * and come back to be keyed the same way.
 *
 * <p>The key is the campaign's shard ({@link #shard}: campaign id modulo the job's shard count), not the
 * campaign: PyFlink writes each key's changed state back to the JVM once per bundle and waits for the answer,
 * so a key per campaign cost a round trip per campaign and bundle; the Python side keeps a shard's campaigns
 * in one map state. The keyed shape is PyFlink's: {@code Row(f0 = shard, f1 = row)}, partitioned by
 * PyFlink's KeyByKeySelector on f0 (applied by the caller), so a Python KeyedProcessFunction consumes it as
 * if its own key_by had made it. The row type is the Python side's ({@code Types.ROW_NAMED(...)}, passed in as
 * its Java type); its fields are read from the input by name. Event timestamps and watermarks pass unchanged.
 */
public final class ByCampaign {
    private static final String UNKEYED = "campaign inside the bytes";

    private ByCampaign() {
    }

    /** The shard of a campaign: what the rows are keyed by. */
    public static long shard(long campaignId, int shards) {
        return Math.floorMod(campaignId, (long) shards);
    }

    /** The keyed shape of rows of {@code rowType}. */
    public static RowTypeInfo keyed(RowTypeInfo rowType) {
        return new RowTypeInfo(new TypeInformation<?>[] {BasicTypeInfo.LONG_TYPE_INFO, rowType},
            new String[] {"f0", "f1"});
    }

    /**
     * The rows of {@code reduced} as rows of {@code rowType} (its fields, by name): those with a campaign id in
     * {@code campaignField} keyed; the rest (`others`: campaign id NULL) to be decoded first.
     */
    public static SingleOutputStreamOperator<Row> split(DataStream<Row> reduced, RowTypeInfo rowType,
                                                        String campaignField, Integer shards) {
        return reduced.process(new Split(rowType, campaignField, shards), keyed(rowType))
            .name("key rows by campaign shard");
    }

    /** The rows `split` could not key, as rows of {@code rowType}. */
    public static DataStream<Row> others(SingleOutputStreamOperator<Row> split, RowTypeInfo rowType) {
        return split.getSideOutput(new OutputTag<>(UNKEYED, rowType));
    }

    /** The keyed rows of `split` and the decoded others (rows of {@code rowType}), keyed the same way. */
    public static DataStream<Row> union(DataStream<Row> keyed, DataStream<Row> decoded, RowTypeInfo rowType,
                                        String campaignField, Integer shards) {
        return keyed.union(decoded.map(new WithKey(rowType, campaignField, shards), keyed(rowType))
            .name("key decoded rows by campaign shard"));
    }

    static int campaignIndex(RowTypeInfo rowType, String campaignField) {
        int index = rowType.getFieldIndex(campaignField);
        if (index < 0) {
            throw new IllegalArgumentException("no field " + campaignField + " in " + rowType);
        }
        return index;
    }

    static final class Split extends ProcessFunction<Row, Row> {
        private final OutputTag<Row> unkeyed;
        private final String[] names;
        private final int campaign;
        private final int shards;

        Split(RowTypeInfo rowType, String campaignField, int shards) {
            this.unkeyed = new OutputTag<>(UNKEYED, rowType);
            this.names = rowType.getFieldNames();
            this.campaign = campaignIndex(rowType, campaignField);
            this.shards = shards;
        }

        @Override
        public void processElement(Row in, Context ctx, Collector<Row> out) {
            Row row = new Row(names.length);
            for (int i = 0; i < names.length; i++) {
                row.setField(i, in.getField(names[i]));  // by name: a column the input lacks fails loudly
            }
            Object campaignId = row.getField(campaign);
            if (campaignId != null) {  // late, raw or other-version records carry none yet
                out.collect(Row.of(shard((Long) campaignId, shards), row));
            } else {
                ctx.output(unkeyed, row);
            }
        }
    }

    static final class WithKey implements MapFunction<Row, Row> {
        private final int campaign;
        private final int shards;

        WithKey(RowTypeInfo rowType, String campaignField, int shards) {
            this.campaign = campaignIndex(rowType, campaignField);
            this.shards = shards;
        }

        @Override
        public Row map(Row row) {
            return Row.of(shard((Long) row.getField(campaign), shards), row);
        }
    }
}
