package io.adserve.flink;

import org.apache.flink.table.annotation.DataTypeHint;
import org.apache.flink.table.annotation.FunctionHint;
import org.apache.flink.table.functions.TableFunction;
import org.apache.flink.types.Row;

/**
 * Decodes one ad.events record (schemas/ad_event.avsc, Avro single-object encoding) inside the JVM, so the
 * click aggregator's per-event path (deduplication, invalid-traffic counts, billing windows) never crosses
 * into Python.
 *
 * <p>As DecodeSpendReport: the caller passes the 10-byte header of the current schema; another header, or
 * anything that does not decode exactly, returns NULL and the record takes the Python path (older or newer
 * contract versions are resolved there; corrupt ones go to the dead-letter topic with the reason).
 *
 * <p>Impressions come without their event id, user id, IP and raw user agent (NULL; the lower-cased agent is
 * there): billing an impression and its one invalid-traffic rule need none of them, and impressions are most
 * of the events. token_key_id is always NULL (the tracker checked the token; the job does not use it).
 *
 * <p>A table function (used with LEFT JOIN LATERAL ... ON TRUE) so a record is decoded once, however many
 * of its fields the query reads; it emits exactly one row per record, with ok = FALSE and the other fields
 * NULL when the record is not decodable here.
 */
@FunctionHint(output = @DataTypeHint("ROW<ok BOOLEAN, event_id STRING, impression_id STRING, event_type STRING, "
        + "event_time BIGINT, served_time BIGINT, campaign_id BIGINT, ad_id BIGINT, price_micros BIGINT, "
        + "billing_type STRING, user_id STRING, ip_address STRING, user_agent STRING, token_key_id STRING, "
        + "agent_lower STRING>"))
public class DecodeAdEvent extends TableFunction<Row> {
    private static final String[] EVENT_TYPES = {"IMPRESSION", "CLICK"};

    public void eval(byte[] value, byte[] header) {
        Row row = decode(value, header);
        collect(row != null ? row : Row.of(false, null, null, null, null, null, null, null, null, null, null, null,
                null, null, null));
    }

    private static Row decode(byte[] value, byte[] header) {
        AvroBinaryReader in = AvroBinaryReader.afterHeader(value, header);
        if (in == null) {
            return null;
        }
        try {
            int eventIdAt = in.position();
            in.skipString();  // read below for a click only
            String impressionId = in.string();
            String eventType = EVENT_TYPES[in.enumIndex(EVENT_TYPES.length)];
            boolean click = eventType == EVENT_TYPES[1];
            String eventId = click ? new AvroBinaryReader(value, eventIdAt).string() : null;
            long eventTime = in.varLong();
            long servedTime = in.varLong();
            long campaignId = in.varLong();
            long adId = in.varLong();
            long price = in.varLong();
            String billingType = EVENT_TYPES[in.enumIndex(EVENT_TYPES.length)];
            String userId = null;
            String ip = null;
            if (click) {
                userId = in.nullableString();
                ip = in.nullableString();
            } else {
                in.skipNullableString();
                in.skipNullableString();
            }
            String agent = in.nullableString();
            in.skipString();  // the token's key id: checked by the tracker, not used here
            if (!in.atEnd() || !AvroBinaryReader.timeInRange(eventTime) || !AvroBinaryReader.timeInRange(servedTime)) {
                return null;
            }
            // The agent lower-cased once (as SQL's LOWER), for the bot markers: LOWER per marker in SQL was a
            // large share of the job's per-event time.
            String agentLower = agent == null ? "" : agent.toLowerCase();
            // An impression's billing and its only invalid-traffic rule (a bot agent, tested on agentLower) need
            // none of its event id, user id, IP or raw agent: not decoded, not carried (string copies and
            // conversions were ~30 % of the source chain's time in a profile; impressions are most events).
            return Row.of(true, eventId, impressionId, eventType, eventTime, servedTime, campaignId, adId, price,
                    billingType, userId, ip, click ? agent : null, null, agentLower);
        } catch (IndexOutOfBoundsException | IllegalArgumentException e) {
            return null;
        }
    }
}
