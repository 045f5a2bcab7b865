package io.adserve.flink;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;

import org.apache.flink.streaming.api.TimerService;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.table.annotation.FunctionHint;
import org.apache.flink.types.Row;
import org.apache.flink.util.Collector;
import org.apache.flink.util.OutputTag;

/**
 * Runs the project's Java operators on golden inputs without a cluster, for the Python unit tests
 * (tests/unit/test_jvm_*.py): one command a line on stdin, one JSON answer a line on stdout. Bytes travel as
 * hex both ways. It calls the operators' own methods and never re-implements a rule of theirs.
 *
 * <pre>
 *   fields                                  the operators' column constants and DecodeAdEvent's output type
 *   read VALUE TYPES                        AvroBinaryReader from byte 0: TYPES comma-separated, each of
 *                                           long, string, nullable_string, enumN (N symbols), bytes,
 *                                           string_map, long_set (sorted), at_end
 *   spend HEADER VALUE [EARLIER_HEADER]     DecodeSpendReport.decode: a row per campaign, or null
 *   event HEADER VALUE                      DecodeAdEvent.eval's one row
 *   campaign HEADER VALUE LEADING_LONGS     LeadingCampaignId.eval
 *   split HEADER VALUE BILLABLE REASON|-    FirstSeen.Split on the input row the click aggregator's view
 *                                           builds (by INPUT_FIELDS name) from DecodeAdEvent's row
 *   windows HEADER WINDOW_MS SERVER_MS OP.. SpendWindows.Table; each OP is r:TS:VALUE (a record at event
 *                                           time TS) or w:MARK (a watermark); answers the rows it emitted
 * </pre>
 */
public final class GoldenDriver {
    private GoldenDriver() {
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        StringBuilder out = new StringBuilder();
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            if (!line.isBlank()) {
                out.append(Json.of(answer(line.trim().split(" ")))).append('\n');
            }
        }
        System.out.print(out);
        System.out.flush();
    }

    static Object answer(String[] words) {
        switch (words[0]) {
            case "fields":
                return fields();
            case "read":
                return read(SpendWindows.hex(words[1]), words[2].split(","));
            case "spend":
                return DecodeSpendReport.decode(bytes(words[2]), SpendWindows.hex(words[1]),
                    words.length > 3 ? SpendWindows.hex(words[3]) : null);
            case "event":
                return decodeEvent(bytes(words[2]), SpendWindows.hex(words[1]));
            case "campaign":
                return new LeadingCampaignId().eval(bytes(words[2]), SpendWindows.hex(words[1]),
                    Integer.parseInt(words[3]));
            case "split":
                return split(bytes(words[2]), SpendWindows.hex(words[1]), Boolean.parseBoolean(words[3]),
                    "-".equals(words[4]) ? null : words[4]);
            case "windows":
                return windows(words);
            default:
                throw new IllegalArgumentException("unknown command " + words[0]);
        }
    }

    /** A value's hex, or "-" for a NULL value. */
    private static byte[] bytes(String hex) {
        return "-".equals(hex) ? null : SpendWindows.hex(hex);
    }

    private static Map<String, Object> fields() {
        Map<String, Object> fields = new HashMap<>();
        fields.put("FirstSeen.INPUT_FIELDS", List.of(FirstSeen.INPUT_FIELDS));
        fields.put("FirstSeen.OUTPUT_FIELDS", List.of(FirstSeen.OUTPUT_FIELDS));
        fields.put("SpendWindows.OUTPUT_FIELDS", List.of(SpendWindows.OUTPUT_FIELDS));
        fields.put("DecodeSpendReport.FIELDS", List.of(DecodeSpendReport.FIELDS));
        fields.put("DecodeSpendReport.COLUMNS", List.of(DecodeSpendReport.COLUMNS));
        fields.put("DecodeAdEvent.output", DecodeAdEvent.class.getAnnotation(FunctionHint.class).output().value());
        return fields;
    }

    private static List<Object> read(byte[] value, String[] types) {
        AvroBinaryReader reader = new AvroBinaryReader(value, 0);
        List<Object> values = new ArrayList<>();
        try {
            for (String type : types) {
                if ("long".equals(type)) {
                    values.add(reader.varLong());
                } else if ("string".equals(type)) {
                    values.add(reader.string());
                } else if ("nullable_string".equals(type)) {
                    values.add(reader.nullableString());
                } else if (type.startsWith("enum")) {
                    values.add(reader.enumIndex(Integer.parseInt(type.substring(4))));
                } else if ("bytes".equals(type)) {
                    ByteBuffer view = reader.bytes();
                    byte[] copy = new byte[view.remaining()];
                    view.get(copy);
                    values.add(copy);
                } else if ("string_map".equals(type)) {
                    values.add(reader.stringMap());
                } else if ("long_set".equals(type)) {
                    values.add(new ArrayList<>(new TreeSet<>(reader.longSet())));
                } else if ("at_end".equals(type)) {
                    values.add(reader.atEnd());
                } else {
                    throw new IllegalArgumentException("unknown type " + type);
                }
            }
        } catch (IndexOutOfBoundsException | IllegalArgumentException e) {
            values.add(Map.of("error", e.getClass().getSimpleName()));
        }
        return values;
    }

    private static Row decodeEvent(byte[] value, byte[] header) {
        List<Row> rows = new ArrayList<>();
        DecodeAdEvent decoder = new DecodeAdEvent();
        decoder.setCollector(new Collecting<>(rows));
        decoder.eval(value, header);
        if (rows.size() != 1) {
            throw new IllegalStateException("DecodeAdEvent emitted " + rows.size() + " rows, not one");
        }
        return rows.get(0);
    }

    /** DecodeAdEvent's output columns by name, from its declared type. */
    private static Map<String, Object> byName(Row row) {
        String type = DecodeAdEvent.class.getAnnotation(FunctionHint.class).output().value();
        String[] columns = type.substring(type.indexOf('<') + 1, type.lastIndexOf('>')).split(",");
        Map<String, Object> named = new HashMap<>();
        for (int i = 0; i < columns.length; i++) {
            named.put(columns[i].trim().split(" ")[0], row.getField(i));
        }
        return named;
    }

    private static List<Object> split(byte[] value, byte[] header, boolean billable, String reason) {
        Map<String, Object> columns = byName(decodeEvent(value, header));
        columns.put("topic", "ad.events");
        columns.put("partition", 3);
        columns.put("offset", 42L);
        columns.put("k", null);
        columns.put("v", value);
        columns.put("billable", billable);
        columns.put("reason", reason);
        Row input = new Row(FirstSeen.INPUT_FIELDS.length);
        for (int i = 0; i < FirstSeen.INPUT_FIELDS.length; i++) {
            if (!columns.containsKey(FirstSeen.INPUT_FIELDS[i])) {
                throw new IllegalStateException("no column " + FirstSeen.INPUT_FIELDS[i] + " for FirstSeen");
            }
            input.setField(i, columns.get(FirstSeen.INPUT_FIELDS[i]));
        }
        List<Object> emitted = new ArrayList<>();
        FirstSeen.Split split = new FirstSeen.Split();
        split.processElement(input, split.new Context() {
            @Override
            public Long timestamp() {
                return 1_000L;
            }

            @Override
            public TimerService timerService() {
                throw new UnsupportedOperationException("Split sets no timers");
            }

            @Override
            public <X> void output(OutputTag<X> tag, X row) {
                emitted.add(Map.of("side", tag.getId(), "row", row));
            }
        }, new Collecting<>(emitted));
        return emitted;
    }

    private static List<Object> windows(String[] words) {
        byte[] header = SpendWindows.hex(words[1]);
        SpendWindows.Table table = new SpendWindows.Table(Long.parseLong(words[2]), Long.parseLong(words[3]));
        List<Object> emitted = new ArrayList<>();
        for (int i = 4; i < words.length; i++) {
            String[] op = words[i].split(":");
            if ("w".equals(op[0])) {
                for (StreamRecord<Row> row : table.advance(Long.parseLong(op[1]))) {
                    emitted.add(Map.of("ts", row.getTimestamp(), "row", row.getValue()));
                }
            } else if (table.offer(DecodeSpendReport.decode(bytes(op[2]), header), Long.parseLong(op[1]))) {
                emitted.add(Map.of("ts", Long.parseLong(op[1]), "raw", op[2]));
            }
        }
        return emitted;
    }

    /** A Collector into a list. */
    static final class Collecting<T> implements Collector<T> {
        private final List<? super T> into;

        Collecting(List<? super T> into) {
            this.into = into;
        }

        @Override
        public void collect(T record) {
            into.add(record);
        }

        @Override
        public void close() {
        }
    }
}
