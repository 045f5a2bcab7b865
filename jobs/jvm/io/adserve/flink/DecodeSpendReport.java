package io.adserve.flink;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.flink.types.Row;

/**
 * Decodes one budget.spend record (schemas/spend_report.avsc, Avro single-object encoding) inside the JVM,
 * for the budget job's per-item operator ({@link SpendWindows}), so that path never crosses into Python.
 *
 * <p>A record carries its campaigns in either form: one in the top-level fields (campaign_id > 0), or many as
 * the packed columns of {@code campaigns} (top-level campaign_id 0); it answers one row per campaign, in the
 * order core.spend.spend_items yields them: the top-level campaign, then each column entry, with its lease
 * from the lease map, its slice request and its hand-back from their arrays. A record with neither (a
 * heartbeat) answers none.
 *
 * <p>The caller passes the 10-byte header it expects (marker and the current schema's fingerprint) and may pass
 * the header of the layout before it (without {@code released}, schemas/history/spend_report.v3.avsc), which is
 * read the same way with no hand-backs, so ad servers not yet upgraded keep drawing and asking for slices in the
 * JVM; a record with any other header is left to the Python path, which resolves older and newer versions of
 * the contract.
 * The body is read field by field in the schema's order. Anything that does not decode exactly (bad
 * varint, short buffer, trailing bytes, bad union index, a block size that does not match its items, a column
 * whose length is not its width times the number of campaign ids) returns NULL for the whole record, and the
 * job sends it to its Python path, which names the reason on the dead-letter topic.
 */
final class DecodeSpendReport {
    /** The record's fields, in the schema's order; a decoded row has all but the last ({@code campaigns}). */
    static final String[] FIELDS = {"server_id", "sequence", "campaign_id", "event_time", "interval_start",
        "expected_spend_micros", "served_ads", "eligible_requests", "lease_id", "max_price_micros", "wants_slice",
        "campaigns"};
    /** The fields of {@code campaigns} (CampaignSpendColumns), in the schema's order. */
    static final String[] COLUMNS = {"campaign_id", "expected_spend_micros", "served_ads", "eligible_requests",
        "max_price_micros", "lease_id", "wants_slice", "released"};

    private DecodeSpendReport() {
    }

    /**
     * One Row(server_id STRING, sequence BIGINT, campaign_id BIGINT, event_time BIGINT, interval_start BIGINT,
     * expected_spend_micros BIGINT, served_ads INT, eligible_requests INT, lease_id STRING,
     * max_price_micros BIGINT, wants_slice BOOLEAN, released BOOLEAN) per campaign the record carries (none
     * for a heartbeat; a top-level campaign is never released), or NULL.
     */
    static List<Row> decode(byte[] value, byte[] header) {
        return decode(value, header, null);
    }

    /** {@link #decode(byte[], byte[])}, also reading records of {@code earlierHeader} (no release array). */
    static List<Row> decode(byte[] value, byte[] header, byte[] earlierHeader) {
        AvroBinaryReader in = AvroBinaryReader.afterHeader(value, header);
        boolean withReleased = true;
        if (in == null && earlierHeader != null) {
            in = AvroBinaryReader.afterHeader(value, earlierHeader);
            withReleased = false;
        }
        if (in == null) {
            return null;
        }
        try {
            String serverId = in.string();
            long sequence = in.varLong();
            long campaignId = in.varLong();
            long eventTime = in.varLong();
            long intervalStart = in.varLong();
            long spend = in.varLong();
            int served = (int) in.varLong();
            int eligible = (int) in.varLong();
            String leaseId = in.nullableString();
            long maxPrice = in.varLong();
            int flag = in.octet();
            if (flag > 1 || !AvroBinaryReader.timeInRange(eventTime) || !AvroBinaryReader.timeInRange(intervalStart)) {
                return null;
            }
            List<Row> items = new ArrayList<>();
            if (campaignId > 0) {
                items.add(Row.of(serverId, sequence, campaignId, eventTime, intervalStart, spend, served, eligible,
                        leaseId, maxPrice, flag == 1, false));
            }
            if (in.present() && !columns(in, serverId, sequence, eventTime, intervalStart, withReleased, items)) {
                return null;
            }
            return in.atEnd() ? items : null;
        } catch (IndexOutOfBoundsException | IllegalArgumentException e) {
            return null;
        }
    }

    /**
     * Adds a CampaignSpendColumns record's entries to {@code items}, each with the record's server, sequence and
     * times; false when a column's length is not its width times the number of campaign ids.
     */
    private static boolean columns(AvroBinaryReader in, String serverId, long sequence, long eventTime,
            long intervalStart, boolean withReleased, List<Row> items) {
        ByteBuffer ids = in.bytes();
        ByteBuffer spend = in.bytes();
        ByteBuffer served = in.bytes();
        ByteBuffer eligible = in.bytes();
        ByteBuffer price = in.bytes();
        Map<String, String> leases = in.stringMap();
        Set<Long> wants = in.longSet();
        Set<Long> released = withReleased ? in.longSet() : Set.of();
        int n = ids.remaining() / Long.BYTES;
        if (ids.remaining() != n * Long.BYTES || spend.remaining() != n * Long.BYTES
                || price.remaining() != n * Long.BYTES || served.remaining() != n * Integer.BYTES
                || eligible.remaining() != n * Integer.BYTES) {
            return false;
        }
        for (int i = 0; i < n; i++) {
            long campaign = ids.getLong(i * Long.BYTES);
            String lease = leases.isEmpty() ? null : leases.get(Long.toString(campaign));
            items.add(Row.of(serverId, sequence, campaign, eventTime, intervalStart, spend.getLong(i * Long.BYTES),
                    served.getInt(i * Integer.BYTES), eligible.getInt(i * Integer.BYTES), lease,
                    price.getLong(i * Long.BYTES), !wants.isEmpty() && wants.contains(campaign),
                    !released.isEmpty() && released.contains(campaign)));
        }
        return true;
    }
}
