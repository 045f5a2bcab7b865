package io.adserve.flink;

import java.nio.charset.StandardCharsets;

/**
 * Avro binary primitives for the project's decoders: zig-zag varints, length-prefixed UTF-8 and nullable
 * unions. Every malformed input throws IllegalArgumentException or IndexOutOfBoundsException; the
 * decoders turn either into NULL and leave the record to the Python path, which names the reason.
 */
final class AvroBinaryReader {
    private final byte[] buf;
    private int pos;

    /** Length of the single-object encoding's header: a 2-byte marker and the schema's 8-byte fingerprint. */
    static final int HEADER = 10;

    /**
     * A reader at the body of {@code value}, or null when {@code value} does not start with {@code header} (the
     * expected schema's single-object header) or has no body: another contract version, or not ours.
     */
    static AvroBinaryReader afterHeader(byte[] value, byte[] header) {
        if (value == null || header == null || header.length != HEADER || value.length <= HEADER) {
            return null;
        }
        for (int i = 0; i < HEADER; i++) {
            if (value[i] != header[i]) {
                return null;
            }
        }
        return new AvroBinaryReader(value, HEADER);
    }

    AvroBinaryReader(byte[] buf, int pos) {
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

    /** Skips a string without decoding it. */
    void skipString() {
        long length = varLong();
        if (length < 0 || length > buf.length - pos) {
            throw new IllegalArgumentException("bad string length");
        }
        pos += (int) length;
    }

    /** Skips a ["null", "string"] union without decoding it. */
    void skipNullableString() {
        long branch = varLong();
        if (branch == 1) {
            skipString();
        } else if (branch != 0) {
            throw new IllegalArgumentException("bad union branch");
        }
    }

    int position() {
        return pos;
    }

    /** A ["null", "string"] union. */
    String nullableString() {
        long branch = varLong();
        if (branch == 0) {
            return null;
        }
        if (branch == 1) {
            return string();
        }
        throw new IllegalArgumentException("bad union branch");
    }

    /** An enum index, checked against the number of symbols. */
    int enumIndex(int symbols) {
        long index = varLong();
        if (index < 0 || index >= symbols) {
            throw new IllegalArgumentException("bad enum index");
        }
        return (int) index;
    }

    boolean atEnd() {
        return pos == buf.length;
    }
}
