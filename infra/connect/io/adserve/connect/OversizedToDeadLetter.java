package io.adserve.connect;

import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.ConnectRecord;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.transforms.Transformation;

/**
 * A Kafka Connect transformation that sends a change record whose JSON is larger than {@code max.bytes} to a
 * dead-letter topic as a small letter (source topic, key, size, source position) instead of the record itself.
 *
 * <p>Kafka Connect has no dead-letter queue for source connectors: a record the producer refuses as too large
 * fails the task, and the task fails again on the same log position after every restart, so no change behind
 * it reaches Kafka. This transformation measures each record as the JSON converter will write it (the
 * connector's converters are JSON without embedded schemas) and routes the oversized one away before the
 * producer sees it. The letter keeps the record's key and source offset, so the connector's position moves on
 * and an operator can find the row. Records at or under the limit pass unchanged.
 */
public class OversizedToDeadLetter<R extends ConnectRecord<R>> implements Transformation<R> {
    public static final String MAX_BYTES = "max.bytes";
    public static final String TOPIC = "topic";
    private static final int KEY_CHARS_KEPT = 1000;

    private static final ConfigDef CONFIG = new ConfigDef()
        .define(MAX_BYTES, ConfigDef.Type.INT, 4 << 20, ConfigDef.Range.atLeast(1024), ConfigDef.Importance.HIGH,
                "the largest record (key plus value, as JSON bytes) passed on unchanged")
        .define(TOPIC, ConfigDef.Type.STRING, ConfigDef.NO_DEFAULT_VALUE, ConfigDef.Importance.HIGH,
                "the topic an oversized record's letter is written to");

    private int maxBytes;
    private String topic;
    private final JsonConverter keys = new JsonConverter();
    private final JsonConverter values = new JsonConverter();

    @Override
    public void configure(Map<String, ?> props) {
        AbstractConfig config = new AbstractConfig(CONFIG, props);
        maxBytes = config.getInt(MAX_BYTES);
        topic = config.getString(TOPIC);
        keys.configure(Map.of("schemas.enable", "false"), true);
        values.configure(Map.of("schemas.enable", "false"), false);
    }

    @Override
    public R apply(R record) {
        byte[] key = record.key() == null ? new byte[0] : keys.fromConnectData(record.topic(), record.keySchema(), record.key());
        byte[] value = record.value() == null ? new byte[0] : values.fromConnectData(record.topic(), record.valueSchema(), record.value());
        long size = (long) key.length + value.length;
        if (size <= maxBytes) {
            return record;
        }
        String keyText = new String(key, StandardCharsets.UTF_8);
        Map<String, Object> letter = new LinkedHashMap<>();
        letter.put("source_topic", record.topic());
        letter.put("key", keyText.length() > KEY_CHARS_KEPT ? keyText.substring(0, KEY_CHARS_KEPT) : keyText);
        letter.put("bytes", size);
        letter.put("max_bytes", (long) maxBytes);
        letter.put("reason", "record larger than max.bytes: not written to " + record.topic());
        Object offset = sourceOffset(record);
        if (offset != null) {
            letter.put("source_offset", String.valueOf(offset));
        }
        return record.newRecord(topic, null, record.keySchema(), record.key(), null, letter, record.timestamp());
    }

    private static Object sourceOffset(ConnectRecord<?> record) {
        if (record instanceof org.apache.kafka.connect.source.SourceRecord) {
            return ((org.apache.kafka.connect.source.SourceRecord) record).sourceOffset();
        }
        return null;
    }

    @Override
    public ConfigDef config() {
        return CONFIG;
    }

    @Override
    public void close() {
        keys.close();
        values.close();
    }
}
