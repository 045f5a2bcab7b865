package io.adserve.flink;

import org.apache.flink.types.Row;

/**
 * Decodes one budget.spend record (schemas/spend_report.avsc, Avro single-object encoding) inside the JVM,
 * for the budget job's per-item operator ({@link SpendWindows}), so that path never crosses into Python.
 *
 * <p>The caller passes the 10-byte header it expects (marker and the current schema's fingerprint); a record
 * with any other header is left to the Python path, which resolves older and newer versions of the contract.
 * The body is read field by field in the schema's order. Anything that does not decode exactly (bad
 * varint, short buffer, trailing bytes, bad union index) returns NULL, and the job sends the record to its
 * Python path, which names the reason on the dead-letter topic.
 */
final class DecodeSpendReport {
    /** The decoded row's columns, in order: the schema's fields, in the schema's order. */
    static final String[] FIELDS = {"server_id", "sequence", "campaign_id", "event_time", "interval_start",
        "expected_spend_micros", "served_ads", "eligible_requests", "lease_id", "max_price_micros", "wants_slice"};

    private DecodeSpendReport() {
    }

    /**
     * Row(server_id STRING, sequence BIGINT, campaign_id BIGINT, event_time BIGINT, interval_start BIGINT,
     * expected_spend_micros BIGINT, served_ads INT, eligible_requests INT, lease_id STRING,
     * max_price_micros BIGINT, wants_slice BOOLEAN), or NULL.
     */
    static Row decode(byte[] value, byte[] header) {
        AvroBinaryReader in = AvroBinaryReader.afterHeader(value, header);
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
            if (flag > 1 || !in.atEnd()) {
                return null;
            }
            return Row.of(serverId, sequence, campaignId, eventTime, intervalStart, spend, served, eligible,
                    leaseId, maxPrice, flag == 1);
        } catch (IndexOutOfBoundsException | IllegalArgumentException e) {
            return null;
        }
    }
}
