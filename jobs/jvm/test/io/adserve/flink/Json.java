package io.adserve.flink;

import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.flink.types.Row;

/** The golden driver's answers as JSON: a Row is an array of its fields, bytes are hex, map keys sorted. */
final class Json {
    private Json() {
    }

    static String of(Object value) {
        StringBuilder out = new StringBuilder();
        write(value, out);
        return out.toString();
    }

    private static void write(Object value, StringBuilder out) {
        if (value == null) {
            out.append("null");
        } else if (value instanceof String) {
            string((String) value, out);
        } else if (value instanceof Number || value instanceof Boolean) {
            out.append(value);
        } else if (value instanceof byte[]) {
            StringBuilder hex = new StringBuilder();
            for (byte b : (byte[]) value) {
                hex.append(String.format("%02x", b & 0xff));
            }
            string(hex.toString(), out);
        } else if (value instanceof Row) {
            Row row = (Row) value;
            Object[] fields = new Object[row.getArity()];
            for (int i = 0; i < fields.length; i++) {
                fields[i] = row.getField(i);
            }
            write(Arrays.asList(fields), out);
        } else if (value instanceof List) {
            out.append('[');
            String sep = "";
            for (Object item : (List<?>) value) {
                out.append(sep);
                write(item, out);
                sep = ",";
            }
            out.append(']');
        } else if (value instanceof Map) {
            out.append('{');
            String sep = "";
            for (Map.Entry<?, ?> e : new TreeMap<>((Map<?, ?>) value).entrySet()) {
                out.append(sep);
                string(String.valueOf(e.getKey()), out);
                out.append(':');
                write(e.getValue(), out);
                sep = ",";
            }
            out.append('}');
        } else {
            throw new IllegalArgumentException("no JSON form for " + value.getClass());
        }
    }

    private static void string(String text, StringBuilder out) {
        out.append('"');
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20 || c > 0x7e) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        out.append('"');
    }
}
