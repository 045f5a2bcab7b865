package io.adserve.flink;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeMap;

import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.typeinfo.BasicTypeInfo;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.java.typeutils.RowTypeInfo;
import org.apache.flink.runtime.state.StateInitializationContext;
import org.apache.flink.runtime.state.StateSnapshotContext;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.types.Row;

/**
 * The budget job's per-item path in one JVM operator, chained to the Kafka source (jobs/budget_pacing/):
 * every budget.spend record is decoded into its campaigns' reports ({@link DecodeSpendReport}: one for a
 * single-campaign record, one per column entry for a batch), deduplicated and summed here, and only reduced
 * rows leave, so no per-report row is serialized for an exchange.
 *
 * <ul>
 *   <li>a report is one (server, sequence, campaign), in whichever form it came; a resend of it counts once,
 *       as the maximum of its copies' figures (copies are identical: a resend is the same record produced
 *       again);</li>
 *   <li>{@code window}: per campaign and 10 s event-time window, the sum of its reports' spend, served ads
 *       and eligible requests, the largest click price and the number of distinct servers; it leaves when
 *       the watermark passes the window's end, stamped end - 1 ms (a SQL TUMBLE window's time);</li>
 *   <li>{@code server}: a report that draws on a slice, asks for one or hands its slices back, once, when
 *       the watermark passes the end of its 1 s window (the pacer answers slice requests per server);</li>
 *   <li>{@code spend_raw}: a record behind the watermark on arrival (a resend after a long outage), or one
 *       this decoder cannot read (another contract version, corrupt), whole (a batch with all its campaigns),
 *       with its Kafka coordinates and bytes, for the job's Python path, which splits it by campaign; a
 *       record that names no campaign (a heartbeat, an empty batch) only moves event time and leaves
 *       nothing.</li>
 * </ul>
 *
 * <p>The reports of an unfinished window are operator state, checkpointed with the source's offsets. Every
 * report of a campaign is on the budget.spend partition its id picks (a keyed record by its key, a batch entry
 * by the writer's choice of partition: core.spend.partition_of), so all of them reach the same source subtask,
 * and its windows (server counts included) are exact at any parallelism.
 *
 * <p>Called from PyFlink through {@link #apply}; the input has the Kafka table's columns topic, partition,
 * offset, k and v (read by name), with event-time timestamps and watermarks.
 */
public final class SpendWindows {
    /** The output row's columns: what the pacer's keyed rows carry (jobs.budget_pacing.functions.ROW_FIELDS). */
    public static final String[] OUTPUT_FIELDS = {"kind", "campaign_id", "server_id", "lease_id", "spend",
        "served", "eligible", "price", "servers", "wants", "topic", "part", "off", "k", "v", "released"};
    public static final RowTypeInfo OUTPUT_TYPE = new RowTypeInfo(new TypeInformation<?>[] {
        BasicTypeInfo.STRING_TYPE_INFO, BasicTypeInfo.LONG_TYPE_INFO, BasicTypeInfo.STRING_TYPE_INFO,
        BasicTypeInfo.STRING_TYPE_INFO, BasicTypeInfo.LONG_TYPE_INFO, BasicTypeInfo.LONG_TYPE_INFO,
        BasicTypeInfo.LONG_TYPE_INFO, BasicTypeInfo.LONG_TYPE_INFO, BasicTypeInfo.LONG_TYPE_INFO,
        BasicTypeInfo.BOOLEAN_TYPE_INFO, BasicTypeInfo.STRING_TYPE_INFO, BasicTypeInfo.INT_TYPE_INFO,
        BasicTypeInfo.LONG_TYPE_INFO, PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO,
        PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO, BasicTypeInfo.BOOLEAN_TYPE_INFO}, OUTPUT_FIELDS);

    /**
     * A pending report in operator state ({@link #PENDING_STATE}): which window list it is in, the window's
     * end, and the report.
     */
    private static final RowTypeInfo PENDING_TYPE = pendingType(true);
    /** The list state of pending reports, and the one of the earlier layout (without "released") it replaces. */
    static final String PENDING_STATE = "spend_windows_v2";
    private static final String EARLIER_PENDING_STATE = "spend_windows";
    private static final RowTypeInfo EARLIER_PENDING_TYPE = pendingType(false);

    private static RowTypeInfo pendingType(boolean withReleased) {
        List<TypeInformation<?>> types = new ArrayList<>(List.of(
            BasicTypeInfo.BOOLEAN_TYPE_INFO, BasicTypeInfo.LONG_TYPE_INFO, BasicTypeInfo.LONG_TYPE_INFO,
            BasicTypeInfo.STRING_TYPE_INFO, BasicTypeInfo.LONG_TYPE_INFO, BasicTypeInfo.STRING_TYPE_INFO,
            BasicTypeInfo.LONG_TYPE_INFO, BasicTypeInfo.LONG_TYPE_INFO, BasicTypeInfo.LONG_TYPE_INFO,
            BasicTypeInfo.LONG_TYPE_INFO, BasicTypeInfo.BOOLEAN_TYPE_INFO));
        List<String> names = new ArrayList<>(List.of("metered", "end", "campaign", "server", "seq", "lease",
            "spend", "served", "eligible", "price", "wants"));
        if (withReleased) {
            types.add(BasicTypeInfo.BOOLEAN_TYPE_INFO);
            names.add("released");
        }
        return new RowTypeInfo(types.toArray(new TypeInformation<?>[0]), names.toArray(new String[0]));
    }

    private SpendWindows() {
    }

    /**
     * The reduced stream of {@code input} (budget.spend as raw Kafka rows). {@code options}:
     * "headerHex,windowMs,serverWindowMs[,earlierHeaderHex]", e.g. "c301...,10000,1000,c301..."; the header is
     * the current SpendReport schema's single-object header, the earlier one that of the layout before it
     * ({@link DecodeSpendReport}).
     */
    public static DataStream<Row> apply(DataStream<Row> input, String options) {
        String[] parts = options.split(",");
        byte[] header = hex(parts[0].trim());
        long windowMs = Long.parseLong(parts[1].trim());
        long serverWindowMs = Long.parseLong(parts[2].trim());
        byte[] earlierHeader = parts.length > 3 ? hex(parts[3].trim()) : null;
        return input.transform("spend windows: decode, deduplicate, sum per campaign", OUTPUT_TYPE,
            new Reduce(header, earlierHeader, windowMs, serverWindowMs));
    }

    static byte[] hex(String text) {
        byte[] out = new byte[text.length() / 2];
        for (int i = 0; i < out.length; i++) {
            out[i] = (byte) Integer.parseInt(text.substring(2 * i, 2 * i + 2), 16);
        }
        return out;
    }

    /** One report's identity: (server, sequence, campaign). */
    static final class Report {
        final String server;
        final long seq;
        final long campaign;

        Report(String server, long seq, long campaign) {
            this.server = server;
            this.seq = seq;
            this.campaign = campaign;
        }

        @Override
        public boolean equals(Object other) {
            if (!(other instanceof Report)) {
                return false;
            }
            Report r = (Report) other;
            return seq == r.seq && campaign == r.campaign && server.equals(r.server);
        }

        @Override
        public int hashCode() {
            return Objects.hash(server, seq, campaign);
        }
    }

    /** One report's figures, the maximum over its copies. */
    static final class Figures {
        String lease;
        long spend;
        long served;
        long eligible;
        long price;
        boolean wants;
        /** The server hands back its slices of the campaign with this report (its last: it drains). */
        boolean released;

        Figures(String lease, long spend, long served, long eligible, long price, boolean wants,
                boolean released) {
            this.lease = lease;
            this.spend = spend;
            this.served = served;
            this.eligible = eligible;
            this.price = price;
            this.wants = wants;
            this.released = released;
        }

        void merge(Figures other) {
            if (lease == null || (other.lease != null && other.lease.compareTo(lease) > 0)) {
                lease = other.lease;
            }
            spend = Math.max(spend, other.spend);
            served = Math.max(served, other.served);
            eligible = Math.max(eligible, other.eligible);
            price = Math.max(price, other.price);
            wants = wants || other.wants;
            released = released || other.released;
        }
    }

    /**
     * The operator's logic without Flink's runtime: the reports of unfinished windows and the watermark. Pure
     * (no I/O, no clock): {@link Reduce} feeds it decoded reports and watermarks and emits what it returns, and
     * tests drive it the same way (tests/unit/test_jvm_spend_windows.py).
     */
    static final class Table {
        private final long windowMs;
        private final long serverWindowMs;
        long watermark = Long.MIN_VALUE;
        /** 10 s window end -> report -> figures. */
        final TreeMap<Long, Map<Report, Figures>> windows = new TreeMap<>();
        /** 1 s window end -> metered report -> figures. */
        final TreeMap<Long, Map<Report, Figures>> metered = new TreeMap<>();

        Table(long windowMs, long serverWindowMs) {
            this.windowMs = windowMs;
            this.serverWindowMs = serverWindowMs;
        }

        /**
         * Adds the reports of one record ({@link DecodeSpendReport} rows, or null when it did not decode) at
         * event time {@code ts}; true when the whole record must leave as {@code spend_raw} for the Python path.
         */
        boolean offer(List<Row> reports, long ts) {
            if (reports == null) {
                return true;  // not readable here
            }
            if (ts <= watermark) {  // behind the job's clock: the Python path adds it on arrival
                for (Row r : reports) {
                    if ((Long) r.getField(2) > 0) {
                        return true;
                    }
                }
                return false;  // a late heartbeat: nothing to add
            }
            for (Row r : reports) {
                addReport(r, ts);
            }
            return false;
        }

        private void addReport(Row r, long ts) {
            long campaign = (Long) r.getField(2);
            if (campaign <= 0) {
                return;  // names no campaign: only its record's event time counted, at the source
            }
            Report report = new Report((String) r.getField(0), (Long) r.getField(1), campaign);
            String lease = (String) r.getField(8);
            boolean wants = (Boolean) r.getField(10);
            boolean released = (Boolean) r.getField(11);
            long spend = (Long) r.getField(5);
            long served = (Integer) r.getField(6);
            long eligible = (Integer) r.getField(7);
            long price = (Long) r.getField(9);
            add(windows, end(ts, windowMs), report,
                new Figures(lease, spend, served, eligible, price, wants, released));
            if (lease != null || wants || released) {
                add(metered, end(ts, serverWindowMs), report,
                    new Figures(lease, spend, served, eligible, price, wants, released));
            }
        }

        private static long end(long ts, long size) {
            return ts - Math.floorMod(ts, size) + size;
        }

        static void add(TreeMap<Long, Map<Report, Figures>> into, long end, Report report, Figures figures) {
            Map<Report, Figures> window = into.get(end);
            if (window == null) {
                window = new HashMap<>();
                into.put(end, window);
            }
            Figures seen = window.putIfAbsent(report, figures);
            if (seen != null) {
                seen.merge(figures);
            }
        }

        /**
         * Moves the watermark to {@code mark} (never back) and returns the rows of every window it has passed,
         * oldest first; at the same end, slices before the window. Each row is stamped end - 1 ms.
         */
        List<StreamRecord<Row>> advance(long mark) {
            watermark = Math.max(watermark, mark);
            List<StreamRecord<Row>> rows = new ArrayList<>();
            while (true) {
                Long nextServer = metered.isEmpty() ? null : metered.firstKey();
                Long nextWindow = windows.isEmpty() ? null : windows.firstKey();
                boolean serverDue = nextServer != null && nextServer - 1 <= watermark;
                boolean windowDue = nextWindow != null && nextWindow - 1 <= watermark;
                if (serverDue && (!windowDue || nextServer <= nextWindow)) {
                    serverRows(metered.pollFirstEntry(), rows);
                } else if (windowDue) {
                    windowRows(windows.pollFirstEntry(), rows);
                } else {
                    return rows;
                }
            }
        }

        private static void serverRows(Map.Entry<Long, Map<Report, Figures>> window, List<StreamRecord<Row>> into) {
            long at = window.getKey() - 1;
            for (Map.Entry<Report, Figures> e : window.getValue().entrySet()) {
                Figures f = e.getValue();
                Row row = new Row(OUTPUT_FIELDS.length);
                row.setField(0, "server");
                row.setField(1, e.getKey().campaign);
                row.setField(2, e.getKey().server);
                row.setField(3, f.lease);
                row.setField(4, f.spend);
                row.setField(5, f.served);
                row.setField(6, f.eligible);
                row.setField(7, f.price);
                row.setField(8, 1L);
                row.setField(9, f.wants);
                row.setField(15, f.released);
                into.add(new StreamRecord<>(row, at));
            }
        }

        private static void windowRows(Map.Entry<Long, Map<Report, Figures>> window, List<StreamRecord<Row>> into) {
            long at = window.getKey() - 1;
            Map<Long, long[]> sums = new TreeMap<>();  // campaign -> spend, served, eligible, price
            Map<Long, Set<String>> servers = new HashMap<>();
            for (Map.Entry<Report, Figures> e : window.getValue().entrySet()) {
                Figures f = e.getValue();
                long[] s = sums.computeIfAbsent(e.getKey().campaign, k -> new long[4]);
                s[0] += f.spend;
                s[1] += f.served;
                s[2] += f.eligible;
                s[3] = Math.max(s[3], f.price);
                servers.computeIfAbsent(e.getKey().campaign, k -> new HashSet<>()).add(e.getKey().server);
            }
            for (Map.Entry<Long, long[]> e : sums.entrySet()) {
                long[] s = e.getValue();
                Row row = new Row(OUTPUT_FIELDS.length);
                row.setField(0, "window");
                row.setField(1, e.getKey());
                row.setField(4, s[0]);
                row.setField(5, s[1]);
                row.setField(6, s[2]);
                row.setField(7, s[3]);
                row.setField(8, (long) servers.get(e.getKey()).size());
                row.setField(9, false);
                row.setField(15, false);
                into.add(new StreamRecord<>(row, at));
            }
        }
    }

    /** The Flink operator around {@link Table}: decodes, keeps the table in operator state, emits its rows. */
    static final class Reduce extends AbstractStreamOperator<Row> implements OneInputStreamOperator<Row, Row> {
        private final byte[] header;
        private final byte[] earlierHeader;
        private final long windowMs;
        private final long serverWindowMs;
        private transient Table table;
        private transient ListState<Row> pendingState;
        private transient ListState<Row> earlierState;

        Reduce(byte[] header, byte[] earlierHeader, long windowMs, long serverWindowMs) {
            this.header = header;
            this.earlierHeader = earlierHeader;
            this.windowMs = windowMs;
            this.serverWindowMs = serverWindowMs;
        }

        @Override
        public void initializeState(StateInitializationContext context) throws Exception {
            super.initializeState(context);
            table = new Table(windowMs, serverWindowMs);
            pendingState = context.getOperatorStateStore().getListState(
                new ListStateDescriptor<>(PENDING_STATE, PENDING_TYPE));
            // A savepoint of the earlier layout keeps its pending reports under the earlier name: they are read
            // once and written back in this layout at the next snapshot.
            earlierState = context.getOperatorStateStore().getListState(
                new ListStateDescriptor<>(EARLIER_PENDING_STATE, EARLIER_PENDING_TYPE));
            for (ListState<Row> from : List.of(pendingState, earlierState)) {
                for (Row p : from.get()) {
                    restore(p);
                }
            }
        }

        private void restore(Row p) {
            TreeMap<Long, Map<Report, Figures>> into = Boolean.TRUE.equals(p.getField(0)) ? table.metered
                : table.windows;
            Report report = new Report((String) p.getField(3), (Long) p.getField(4), (Long) p.getField(2));
            boolean released = p.getArity() > 11 && Boolean.TRUE.equals(p.getField(11));
            Figures figures = new Figures((String) p.getField(5), (Long) p.getField(6), (Long) p.getField(7),
                (Long) p.getField(8), (Long) p.getField(9), (Boolean) p.getField(10), released);
            Table.add(into, (Long) p.getField(1), report, figures);
        }

        @Override
        public void snapshotState(StateSnapshotContext context) throws Exception {
            super.snapshotState(context);
            List<Row> entries = new ArrayList<>();
            snapshot(false, table.windows, entries);
            snapshot(true, table.metered, entries);
            pendingState.update(entries);
            earlierState.clear();
        }

        private static void snapshot(boolean isMetered, TreeMap<Long, Map<Report, Figures>> from, List<Row> into) {
            for (Map.Entry<Long, Map<Report, Figures>> window : from.entrySet()) {
                for (Map.Entry<Report, Figures> e : window.getValue().entrySet()) {
                    Report r = e.getKey();
                    Figures f = e.getValue();
                    into.add(Row.of(isMetered, window.getKey(), r.campaign, r.server, r.seq, f.lease, f.spend,
                        f.served, f.eligible, f.price, f.wants, f.released));
                }
            }
        }

        @Override
        public void processElement(StreamRecord<Row> element) {
            Row in = element.getValue();
            byte[] value = (byte[]) in.getField("v");
            if (table.offer(DecodeSpendReport.decode(value, header, earlierHeader), element.getTimestamp())) {
                Row raw = new Row(OUTPUT_FIELDS.length);
                raw.setField(0, "spend_raw");
                raw.setField(10, in.getField("topic"));
                raw.setField(11, in.getField("partition"));
                raw.setField(12, in.getField("offset"));
                raw.setField(13, in.getField("k"));
                raw.setField(14, value);
                output.collect(new StreamRecord<>(raw, element.getTimestamp()));
            }
        }

        @Override
        public void processWatermark(Watermark mark) throws Exception {
            for (StreamRecord<Row> row : table.advance(mark.getTimestamp())) {
                output.collect(row);
            }
            super.processWatermark(mark);
        }
    }
}
