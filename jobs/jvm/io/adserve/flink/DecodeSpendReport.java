package io.adserve.flink;

import java.nio.charset.StandardCharsets;

import org.apache.flink.table.annotation.DataTypeHint;
import org.apache.flink.table.functions.ScalarFunction;
import org.apache.flink.types.Row;

/**
 * Decodes one budget.spend record (schemas/spend_report.avsc, Avro single-object encoding) inside the JVM,
 * so the per-item path of the budget job never crosses into Python.
 *
 * <p>The caller passes the 10-byte header it expects (marker and the current schema's fingerprint); a record
 * with any other header is left to the Python path, which resolves older and newer versions of the contract.
 * The body is read field by field in the schema's order. Anything that does not decode exactly (bad
 * varint, short buffer, trailing bytes, bad union index) returns NULL, and the job sends the record to its
 * Python path, which names the reason on the dead-letter topic.
 */
public class DecodeSpendReport extends ScalarFunction {
    private static final int HEADER = 10;

    @DataTypeHint("ROW<server_id STRING, `sequence` BIGINT, campaign_id BIGINT, event_time BIGINT, "
            + "interval_start BIGINT, expected_spend_micros BIGINT, served_ads INT, eligible_requests INT, "
            + "lease_id STRING, max_price_micros BIGINT, wants_slice BOOLEAN>")
    public Row eval(byte[] value, byte[] header) {
        if (value == null || header == null || header.length != HEADER || value.length <= HEADER) {
            return null;
        }
        for (int i = 0; i < HEADER; i++) {
            if (value[i] != header[i]) {
                return null; // another writer schema (an older or newer contract) or not ours at all
            }
        }
        try {
            Reader in = new Reader(value, HEADER);
            String serverId = in.string();
            long sequence = in.varLong();
            long campaignId = in.varLong();
            long eventTime = in.varLong();
            long intervalStart = in.varLong();
            long spend = in.varLong();
            int served = (int) in.varLong();
            int eligible = (int) in.varLong();
            long branch = in.varLong();
            String leaseId;
            if (branch == 0) {
                leaseId = null;
            } else if (branch == 1) {
                leaseId = in.string();
            } else {
                return null;
            }
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

    /** Avro binary primitives: zig-zag varints and length-prefixed UTF-8. */
    private static final class Reader {
        private final byte[] buf;
        private int pos;

        Reader(byte[] buf, int pos) {
            this.buf = buf;
            this.pos = pos;
        }

        long varLong() {
            long raw = 0;
            int shift = 0;
            while (true) {
                if (shift > 63) {
                    throw new IllegalArgumentException("varint too long");
                }
                int b = buf[pos++] & 0xff;
                raw |= (long) (b & 0x7f) << shift;
                if ((b & 0x80) == 0) {
                    break;
                }
                shift += 7;
            }
            return (raw >>> 1) ^ -(raw & 1);
        }

        int octet() {
            return buf[pos++] & 0xff;
        }

        String string() {
            long length = varLong();
            if (length < 0 || length > buf.length - pos) {
                throw new IllegalArgumentException("bad string length");
            }
            String s = new String(buf, pos, (int) length, StandardCharsets.UTF_8);
            pos += (int) length;
            return s;
        }

        boolean atEnd() {
            return pos == buf.length;
        }
    }
}
