package io.adserve.flink;

import org.apache.flink.table.functions.ScalarFunction;

/**
 * The campaign id of a record whose schema has {@code campaign_id} (an Avro long) as its first field
 * (serving.campaigns, billing.billed_spend), or after a number of leading longs (serving.ads: the ad id, then
 * the campaign id), read inside the JVM from the Avro single-object encoding.
 *
 * <p>It lets a job key a campaign record by its campaign's shard where the record stands in the stream,
 * instead of sending it through a Python decoder first, which would return it behind rows that followed
 * it. Only the id is read: the job's Python operator decodes the whole record when it applies it, and sends a
 * record that does not decode there to the dead-letter topic. A record with another header (an older or
 * newer contract version, or not Avro at all) or a first field that does not decode returns NULL and takes
 * the Python decoder's path, which resolves other versions and names the reason of a corrupt one.
 */
public class LeadingCampaignId extends ScalarFunction {

    public Long eval(byte[] value, byte[] header) {
        return eval(value, header, 0);
    }

    /** The campaign id after {@code leadingLongs} Avro longs (serving.ads: 1, its ad id). */
    public Long eval(byte[] value, byte[] header, int leadingLongs) {
        AvroBinaryReader in = AvroBinaryReader.afterHeader(value, header);
        if (in == null) {
            return null;
        }
        try {
            for (int i = 0; i < leadingLongs; i++) {
                in.varLong();
            }
            long campaignId = in.varLong();
            return campaignId > 0 ? campaignId : null;
        } catch (IndexOutOfBoundsException | IllegalArgumentException e) {
            return null;
        }
    }
}
