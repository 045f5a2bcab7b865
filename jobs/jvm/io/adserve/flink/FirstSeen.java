package io.adserve.flink;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.state.StateTtlConfig;
import org.apache.flink.api.common.typeinfo.BasicTypeInfo;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.api.java.typeutils.RowTypeInfo;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.ProcessFunction;
import org.apache.flink.types.Row;
import org.apache.flink.util.Collector;
import org.apache.flink.util.OutputTag;

/**
 * The click aggregator's per-event path in one keyed JVM operator (jobs/click_aggregator/): every decoded
 * ad.events record passes here once, keyed by impression id, and only a reduced stream leaves.
 *
 * <ul>
 *   <li>deduplicate: the first (impression id, event type) wins, in arrival order; remembered for the
 *       given horizon (the token's lifetime plus the allowed lateness; processing time, as Flink's state
 *       TTL and the SQL deduplication before it);</li>
 *   <li>an event behind the watermark on arrival leaves as a {@code late} row (billed on the Python
 *       path);</li>
 *   <li>an on-time impression is summed into its campaign's 10 s window with the flags SQL computed
 *       before this operator ({@code billable}, {@code reason}: the invalid-traffic rules stay generated
 *       from core.clicks), and the window leaves as one {@code window} row when the watermark passes its
 *       end, stamped end - 1 ms like a SQL TUMBLE window's time;</li>
 *   <li>an on-time click leaves as a {@code click} row (burst counts, tagging and its window stay in SQL:
 *       they are per user and per IP), carrying when its impression's beacon was first seen, if it was
 *       ({@code impression_ts});</li>
 *   <li>an impression whose click came first leaves as an {@code impression} row, for SQL to join with
 *       that click.</li>
 * </ul>
 *
 * <p>Records that did not decode ({@code ok} false) skip the keyed step and leave as {@code raw} rows
 * with their Kafka coordinates and bytes.
 *
 * <p>Called from PyFlink through {@link #apply}; the input's columns are {@link #INPUT_FIELDS}, in order.
 */
public final class FirstSeen {
    /** The input row's columns, in order (the SQL view that feeds this operator selects exactly these). */
    public static final String[] INPUT_FIELDS = {"topic", "partition", "offset", "k", "v", "ok", "event_id",
        "impression_id", "event_type", "event_time", "served_time", "campaign_id", "price_micros",
        "billing_type", "user_id", "ip_address", "user_agent", "billable", "reason"};
    private static final int TOPIC = 0, PARTITION = 1, OFFSET = 2, KEY = 3, VALUE = 4, OK = 5, EVENT_ID = 6,
        IMPRESSION_ID = 7, EVENT_TYPE = 8, EVENT_TIME = 9, SERVED_TIME = 10, CAMPAIGN_ID = 11, PRICE = 12,
        BILLING_TYPE = 13, USER_ID = 14, IP = 15, AGENT = 16, BILLABLE = 17, REASON = 18;

    /**
     * The output row's columns: kind, the window sums, the event's fields, its impression's time, raw bytes, and
     * the reason SQL gave the event before this operator (the rules that need no burst counts; a late event is
     * billed with it, since an impression comes without the fields to decide it again).
     */
    public static final String[] OUTPUT_FIELDS = {"kind", "campaign_id", "billable", "impressions", "clicks",
        "invalid", "invalid_events", "event_id", "impression_id", "event_type", "event_time", "served_time",
        "price_micros", "billing_type", "user_id", "ip_address", "user_agent", "impression_ts", "ts_ms",
        "topic", "part", "off", "k", "v", "reason"};
    public static final RowTypeInfo OUTPUT_TYPE = new RowTypeInfo(new TypeInformation<?>[] {
        BasicTypeInfo.STRING_TYPE_INFO, BasicTypeInfo.LONG_TYPE_INFO, BasicTypeInfo.LONG_TYPE_INFO,
        BasicTypeInfo.LONG_TYPE_INFO, BasicTypeInfo.LONG_TYPE_INFO, BasicTypeInfo.LONG_TYPE_INFO,
        BasicTypeInfo.LONG_TYPE_INFO, BasicTypeInfo.STRING_TYPE_INFO, BasicTypeInfo.STRING_TYPE_INFO,
        BasicTypeInfo.STRING_TYPE_INFO, BasicTypeInfo.LONG_TYPE_INFO, BasicTypeInfo.LONG_TYPE_INFO,
        BasicTypeInfo.LONG_TYPE_INFO, BasicTypeInfo.STRING_TYPE_INFO, BasicTypeInfo.STRING_TYPE_INFO,
        BasicTypeInfo.STRING_TYPE_INFO, BasicTypeInfo.STRING_TYPE_INFO, BasicTypeInfo.LONG_TYPE_INFO,
        BasicTypeInfo.LONG_TYPE_INFO, BasicTypeInfo.STRING_TYPE_INFO, BasicTypeInfo.INT_TYPE_INFO,
        BasicTypeInfo.LONG_TYPE_INFO, PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO,
        PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO, BasicTypeInfo.STRING_TYPE_INFO}, OUTPUT_FIELDS);

    /**
     * The decoded event alone (no Kafka bytes), as it crosses the exchange to the keyed step (an impression's
     * event id, user id, IP and raw agent are NULL: see DecodeAdEvent).
     */
    private static final RowTypeInfo EVENT_TYPE_INFO = new RowTypeInfo(new TypeInformation<?>[] {
        BasicTypeInfo.STRING_TYPE_INFO, BasicTypeInfo.STRING_TYPE_INFO, BasicTypeInfo.STRING_TYPE_INFO,
        BasicTypeInfo.LONG_TYPE_INFO, BasicTypeInfo.LONG_TYPE_INFO, BasicTypeInfo.LONG_TYPE_INFO,
        BasicTypeInfo.LONG_TYPE_INFO, BasicTypeInfo.STRING_TYPE_INFO, BasicTypeInfo.STRING_TYPE_INFO,
        BasicTypeInfo.STRING_TYPE_INFO, BasicTypeInfo.STRING_TYPE_INFO, BasicTypeInfo.BOOLEAN_TYPE_INFO,
        BasicTypeInfo.STRING_TYPE_INFO});
    private static final int E_EVENT_ID = 0, E_IMPRESSION_ID = 1, E_EVENT_TYPE = 2, E_EVENT_TIME = 3,
        E_SERVED_TIME = 4, E_CAMPAIGN_ID = 5, E_PRICE = 6, E_BILLING_TYPE = 7, E_USER_ID = 8, E_IP = 9,
        E_AGENT = 10, E_BILLABLE = 11, E_REASON = 12;

    private static final OutputTag<Row> RAW = new OutputTag<>("raw", OUTPUT_TYPE);

    private FirstSeen() {
    }

    /**
     * The reduced stream of {@code input} (rows of {@link #INPUT_FIELDS}, with event-time timestamps and
     * watermarks). {@code options}: "horizonMs,windowMs", e.g. "4200000,10000".
     */
    public static DataStream<Row> apply(DataStream<Row> input, String options) {
        String[] parts = options.split(",");
        long horizonMs = Long.parseLong(parts[0].trim());
        long windowMs = Long.parseLong(parts[1].trim());
        SingleOutputStreamOperator<Row> events = input.process(new Split(), EVENT_TYPE_INFO)
            .name("first seen: split undecodable records");
        DataStream<Row> reduced = events
            .keyBy(new ByImpression())
            .process(new Dedupe(horizonMs, windowMs), OUTPUT_TYPE)
            .name("first seen: deduplicate, sum impressions per 10 s window")
            .uid("first-seen");  // its keyed state: the impressions seen; never renamed once deployed
        return reduced.union(events.getSideOutput(RAW));
    }

    /** Decoded events go on without their bytes; the rest leave at once as raw rows. */
    static final class Split extends ProcessFunction<Row, Row> {
        @Override
        public void processElement(Row in, Context ctx, Collector<Row> out) {
            if (!Boolean.TRUE.equals(in.getField(OK))) {
                Row raw = new Row(OUTPUT_FIELDS.length);
                raw.setField(0, "raw");
                raw.setField(18, ctx.timestamp());
                raw.setField(19, in.getField(TOPIC));
                raw.setField(20, in.getField(PARTITION));
                raw.setField(21, in.getField(OFFSET));
                raw.setField(22, in.getField(KEY));
                raw.setField(23, in.getField(VALUE));
                ctx.output(RAW, raw);
                return;
            }
            out.collect(Row.of(in.getField(EVENT_ID), in.getField(IMPRESSION_ID), in.getField(EVENT_TYPE),
                in.getField(EVENT_TIME), in.getField(SERVED_TIME), in.getField(CAMPAIGN_ID), in.getField(PRICE),
                in.getField(BILLING_TYPE), in.getField(USER_ID), in.getField(IP), in.getField(AGENT),
                in.getField(BILLABLE), in.getField(REASON)));
        }
    }

    static final class ByImpression implements KeySelector<Row, String> {
        @Override
        public String getKey(Row row) {
            return (String) row.getField(E_IMPRESSION_ID);
        }
    }

    /**
     * Keyed by impression id: its impression's and its click's first copies are remembered in one small
     * value (so a click finds its impression, and an impression its earlier click, without a join). The
     * impression windows are summed per (window, campaign) in a local table of the subtask, checkpointed
     * with it, and leave when an event-time timer at the window's end fires.
     */
    static final class Dedupe extends KeyedProcessFunction<String, Row, Row> implements CheckpointedFunction {
        private static final long UNSEEN = Long.MIN_VALUE;
        private final long horizonMs;
        private final long windowMs;
        /** {impression's event time, click's event time} of the first copies seen; UNSEEN when not. */
        private transient ValueState<long[]> seen;
        /** window end -> campaign -> {billable micros, impressions, 0, invalid micros, invalid events}. */
        private transient TreeMap<Long, Map<Long, long[]>> pending;
        private transient ListState<long[]> pendingState;

        Dedupe(long horizonMs, long windowMs) {
            this.horizonMs = horizonMs;
            this.windowMs = windowMs;
        }

        @Override
        public void open(OpenContext context) {
            ValueStateDescriptor<long[]> descriptor = new ValueStateDescriptor<>("first_seen",
                PrimitiveArrayTypeInfo.LONG_PRIMITIVE_ARRAY_TYPE_INFO);
            descriptor.enableTimeToLive(StateTtlConfig.newBuilder(Duration.ofMillis(horizonMs))
                .setUpdateType(StateTtlConfig.UpdateType.OnCreateAndWrite)
                .setStateVisibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
                .build());
            seen = getRuntimeContext().getState(descriptor);
        }

        @Override
        public void initializeState(FunctionInitializationContext context) throws Exception {
            pendingState = context.getOperatorStateStore().getListState(new ListStateDescriptor<>(
                "impression_windows", PrimitiveArrayTypeInfo.LONG_PRIMITIVE_ARRAY_TYPE_INFO));
            pending = new TreeMap<>();
            for (long[] entry : pendingState.get()) {
                pending.computeIfAbsent(entry[0], k -> new HashMap<>()).put(entry[1], Arrays.copyOfRange(entry, 2, 7));
            }
        }

        @Override
        public void snapshotState(FunctionSnapshotContext context) throws Exception {
            List<long[]> entries = new ArrayList<>();
            for (Map.Entry<Long, Map<Long, long[]>> window : pending.entrySet()) {
                for (Map.Entry<Long, long[]> campaign : window.getValue().entrySet()) {
                    long[] sums = campaign.getValue();
                    entries.add(new long[] {window.getKey(), campaign.getKey(), sums[0], sums[1], sums[2], sums[3],
                        sums[4]});
                }
            }
            pendingState.update(entries);
        }

        @Override
        public void processElement(Row e, Context ctx, Collector<Row> out) throws Exception {
            boolean click = "CLICK".equals(e.getField(E_EVENT_TYPE));
            long[] times = seen.value();
            if (times == null) {
                times = new long[] {UNSEEN, UNSEEN};
            } else if (times[click ? 1 : 0] != UNSEEN) {
                return;  // a repeated beacon
            }
            long ts = ctx.timestamp();
            times[click ? 1 : 0] = ts;
            seen.update(times);
            boolean onTime = ts > ctx.timerService().currentWatermark();
            if (!click && times[1] != UNSEEN) {
                out.collect(event("impression", e, null, ts));  // its click came first: SQL joins them
            }
            if (!onTime) {
                out.collect(event("late", e, null, ts));
                return;
            }
            if (click) {
                out.collect(event("click", e, times[0] == UNSEEN ? null : times[0], ts));
                return;
            }
            long end = ts - Math.floorMod(ts, windowMs) + windowMs;
            Map<Long, long[]> campaigns = pending.get(end);
            if (campaigns == null) {
                campaigns = new HashMap<>();
                pending.put(end, campaigns);
                ctx.timerService().registerEventTimeTimer(end - 1);
            }
            long[] sums = campaigns.computeIfAbsent((Long) e.getField(E_CAMPAIGN_ID), k -> new long[5]);
            boolean billable = Boolean.TRUE.equals(e.getField(E_BILLABLE));
            boolean valid = e.getField(E_REASON) == null;
            long price = (Long) e.getField(E_PRICE);
            if (billable && valid) {
                sums[0] += price;
                sums[1] += 1;
            }
            if (billable && !valid) {
                sums[3] += price;
            }
            if (!valid) {
                sums[4] += 1;
            }
        }

        @Override
        public void onTimer(long timestamp, OnTimerContext ctx, Collector<Row> out) {
            // Every window the watermark has passed, whichever key's timer fired first.
            while (!pending.isEmpty() && pending.firstKey() - 1 <= timestamp) {
                Map.Entry<Long, Map<Long, long[]>> window = pending.pollFirstEntry();
                List<Long> campaigns = new ArrayList<>(window.getValue().keySet());
                campaigns.sort(null);
                for (Long campaign : campaigns) {
                    long[] sums = window.getValue().get(campaign);
                    Row row = new Row(OUTPUT_FIELDS.length);
                    row.setField(0, "window");
                    row.setField(1, campaign);
                    for (int i = 0; i < 5; i++) {
                        row.setField(2 + i, sums[i]);
                    }
                    row.setField(18, window.getKey() - 1);
                    out.collect(row);
                }
            }
        }

        private static Row event(String kind, Row e, Long impressionTs, long ts) {
            Row row = new Row(OUTPUT_FIELDS.length);
            row.setField(0, kind);
            row.setField(1, e.getField(E_CAMPAIGN_ID));
            row.setField(7, e.getField(E_EVENT_ID));
            row.setField(8, e.getField(E_IMPRESSION_ID));
            row.setField(9, e.getField(E_EVENT_TYPE));
            row.setField(10, e.getField(E_EVENT_TIME));
            row.setField(11, e.getField(E_SERVED_TIME));
            row.setField(12, e.getField(E_PRICE));
            row.setField(13, e.getField(E_BILLING_TYPE));
            row.setField(14, e.getField(E_USER_ID));
            row.setField(15, e.getField(E_IP));
            row.setField(16, e.getField(E_AGENT));
            row.setField(17, impressionTs);
            row.setField(18, ts);
            row.setField(24, e.getField(E_REASON));
            return row;
        }
    }
}
