package io.adserve.flink;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;

/**
 * Avro binary primitives for the project's decoders: zig-zag varints, length-prefixed UTF-8 and bytes,
 * nullable unions, and the blocks of maps and arrays. Every malformed input throws IllegalArgumentException
 * or IndexOutOfBoundsException; the decoders turn either into NULL and leave the record to the Python path,
 * which names the reason.
 */
final class AvroBinaryReader {
    private final byte[] buf;
    private int pos;

    /** Length of the single-object encoding's header: a 2-byte marker and the schema's 8-byte fingerprint. */
    static final int HEADER = 10;

    /**
     * The last instant a record's time may name, 9999-12-31T23:59:59.999Z (core.dead_letters.MAX_EVENT_TIME_MS):
     * a record with a time outside 0 to this is corrupt, and goes to the Python path, which dead-letters it.
     */
    static final long MAX_TIME_MS = 253_402_300_799_999L;

    /** Whether an epoch-millisecond time lies between 1970 and the end of year 9999. */
    static boolean timeInRange(long ms) {
        return ms >= 0 && ms <= MAX_TIME_MS;
    }

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

    /**
     * A {@code bytes} value as a little-endian view of the buffer (no copy), positioned at its first byte and
     * limited to its length: packed columns read with {@code getLong(8 * i)} and {@code getInt(4 * i)}.
     */
    ByteBuffer bytes() {
        long length = varLong();
        if (length < 0 || length > buf.length - pos) {
            throw new IllegalArgumentException("bad bytes length");
        }
        ByteBuffer view = ByteBuffer.wrap(buf, pos, (int) length).slice().order(ByteOrder.LITTLE_ENDIAN);
        pos += (int) length;
        return view;
    }

    /**
     * A map of strings to strings, read block by block ({@link #blocks}); a key written twice keeps its last
     * value, as the Python codec's dict does.
     */
    Map<String, String> stringMap() {
        Map<String, String> map = new HashMap<>();
        Blocks blocks = blocks();
        for (long n = blocks.next(); n > 0; n = blocks.next()) {
            for (long i = 0; i < n; i++) {
                String key = string();
                map.put(key, string());
            }
        }
        return map;
    }

    /** An array of longs as a set, read block by block ({@link #blocks}). */
    Set<Long> longSet() {
        Set<Long> set = new HashSet<>();
        Blocks blocks = blocks();
        for (long n = blocks.next(); n > 0; n = blocks.next()) {
            for (long i = 0; i < n; i++) {
                set.add(varLong());
            }
        }
        return set;
    }

    /** The blocks of the map or array at the reader's position. */
    Blocks blocks() {
        return new Blocks();
    }

    /**
     * The blocks of a map or an array, per the Avro specification: each block is an item count and that many
     * items, and a count of 0 ends them. A negative count means its absolute value, followed by the block's
     * size in bytes; the items must then take exactly that size. Only for items of at least one byte (every
     * item type the project's maps and arrays have), which bounds a count by the bytes left.
     */
    final class Blocks {
        private int end = -1;

        private Blocks() {
        }

        /** Ends the previous block (checking its size, if it gave one) and reads the next one's count; 0 at the end. */
        long next() {
            if (end >= 0 && pos != end) {
                throw new IllegalArgumentException("block size does not match its items");
            }
            end = -1;
            long count = varLong();
            if (count < 0) {
                if (count == Long.MIN_VALUE) {
                    throw new IllegalArgumentException("bad block count");
                }
                count = -count;
                long size = varLong();
                if (size < 0 || size > buf.length - pos) {
                    throw new IllegalArgumentException("bad block size");
                }
                end = pos + (int) size;
            }
            if (count > buf.length - pos) {
                throw new IllegalArgumentException("bad block count");
            }
            return count;
        }
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

    /** The branch of a two-branch union whose first branch is "null": false for null, true for the other. */
    boolean present() {
        long branch = varLong();
        if (branch != 0 && branch != 1) {
            throw new IllegalArgumentException("bad union branch");
        }
        return branch == 1;
    }

    /** A ["null", "string"] union. */
    String nullableString() {
        return present() ? string() : null;
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
