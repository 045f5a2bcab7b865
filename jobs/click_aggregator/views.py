"""The JVM part of `click_aggregator` as Flink SQL views: decode, deduplicate and sum impressions (the JVM
operator FirstSeen), count click bursts, tag, join, window; then one `reduced` view of everything Python bills.
The per-event rules are core.clicks', generated as SQL from its constants; no rule is written here.

`reduced` rows (REDUCED_FIELDS): kind `window` (a campaign's 10 s window part), `late` (an event behind the
clock, its fields as JSON), `joined` (a click that found its impression later), `raw` (an event the JVM could
not read), `campaign` (a campaign record, its id read in the JVM so it is keyed where it stands)."""
from __future__ import annotations

from core import clicks

REDUCED_FIELDS = ["kind", "campaign_id", "billable", "impressions", "clicks", "invalid", "invalid_events", "joined",
                  "topic", "part", "off", "k", "v", "event"]
EVENT_FIELDS = ("event_id", "impression_id", "event_type", "event_time", "served_time", "campaign_id",
                "price_micros", "billing_type", "user_id", "ip_address", "user_agent")
_FIELDS = ", ".join(EVENT_FIELDS)
_NULL_LONG = "CAST(NULL AS BIGINT)"
_NULL_RAW = "CAST(NULL AS STRING), CAST(NULL AS INT), CAST(NULL AS BIGINT), CAST(NULL AS BYTES), CAST(NULL AS BYTES)"


def create_views(t_env, header_hex: str, campaign_header_hex: str) -> None:
    """Every view, in order, from the sources `events_in` and `campaigns_in` to `reduced`."""
    # One-phase windows: the lateness check just before a window is then made against the same watermark the
    # window holds (a local/global split lets a partial arrive at the global half after its window fired).
    t_env.get_config().set("table.optimizer.agg-phase-strategy", "ONE_PHASE")
    _decoded_events(t_env, header_hex)
    _first_seen(t_env, "events_decoded", "first_seen")
    _counted_clicks(t_env)
    _tagged_clicks(t_env)
    _windows(t_env, "tagged_clicks_on_time", "windows")
    _reduced(t_env, campaign_header_hex)


def _decoded_events(t_env, header_hex: str) -> None:
    """Each record decoded once (a table function: a scalar one would run again for every field read), with the
    flags an impression is billed by: billable and its invalid reason (no burst counts: those are for clicks,
    tagged again after counting)."""
    t_env.execute_sql(f"""
        CREATE TEMPORARY VIEW events_decoded AS
        SELECT CASE WHEN ok THEN NULL ELSE `topic` END AS `topic`, `partition`, `offset`,
               CASE WHEN ok THEN NULL ELSE k END AS k, CASE WHEN ok THEN NULL ELSE v END AS v, ok, {_FIELDS},
               event_type = billing_type AS billable,
               {clicks.invalid_reason_sql(lowered_agent="agent_lower")} AS reason, ts FROM (
          SELECT `topic`, `partition`, `offset`, ts, k, v, d.*, CAST(0 AS BIGINT) AS user_n,
                 CAST(0 AS BIGINT) AS ip_n
          FROM events_in LEFT JOIN LATERAL TABLE(decode_event(v, X'{header_hex}')) AS d ON TRUE)""")


def _first_seen(t_env, source: str, name: str) -> None:
    """`name`: `source` after the project's JVM operator io.adserve.flink.FirstSeen (jobs/jvm): deduplicated by
    impression, impressions summed per campaign and 10 s window, clicks, late events and undecodable records
    passed on. Rowtime and watermarks kept."""
    from pyflink.datastream import DataStream
    from pyflink.table import Schema
    from pyflink.util.java_utils import invoke_method

    stream = t_env.to_data_stream(t_env.from_path(source))
    reduced = invoke_method(None, "io.adserve.flink.FirstSeen", "apply",
                            [stream._j_data_stream, f"{clicks.DEDUPE_HORIZON_MS},{clicks.WINDOW_MS}"],
                            ["org.apache.flink.streaming.api.datastream.DataStream", "java.lang.String"])
    t_env.create_temporary_view(name, t_env.from_data_stream(
        DataStream(reduced), Schema.new_builder().column_by_metadata("rt", "TIMESTAMP_LTZ(3)", "rowtime")
        .watermark("rt", "SOURCE_WATERMARK()").build()))


def _counted_clicks(t_env) -> None:
    """Clicks on time, each with its user's and its IP's count of clicks in its event-time minute (RANGE: ties
    counted together, so a replay gives the same counts)."""
    t_env.execute_sql(f"""
        CREATE TEMPORARY VIEW clicks_on_time AS
        SELECT {_FIELDS}, impression_ts, ts_ms, FLOOR(rt TO MINUTE) AS click_minute, rt AS ts
        FROM first_seen WHERE kind = 'click'""")
    for name, source, column, field in (("clicks_by_user", "clicks_on_time", "user_n", "user_id"),
                                        ("clicks_counted", "clicks_by_user", "ip_n", "ip_address")):
        t_env.execute_sql(f"""
            CREATE TEMPORARY VIEW {name} AS
            SELECT *, COUNT(*) OVER (PARTITION BY {field}, click_minute ORDER BY ts
                                     RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS {column}
            FROM {source}""")


def _tagged_clicks(t_env) -> None:
    """Clicks tagged (core.clicks.invalid_reason_sql), joined when FirstSeen had seen their impression inside
    core.clicks.joins' bounds, and checked against the watermark just before their window: one that would be
    late there takes the late path (a window would drop it without a trace). A click whose impression came
    after it is joined by an interval join (`clicks_joined`) and leaves as its own row."""
    lifetime, lateness = clicks.TOKEN_LIFETIME_MS, clicks.ALLOWED_LATENESS_MS
    t_env.execute_sql(f"""
        CREATE TEMPORARY VIEW tagged_clicks AS
        SELECT *, billable AND reason IS NULL AND impression_ts IS NOT NULL
                  AND {clicks.joins_sql("ts_ms", "impression_ts")} AS joined FROM (
          SELECT {_FIELDS}, impression_ts, ts_ms, event_type = billing_type AS billable,
                 {clicks.invalid_reason_sql()} AS reason, ts,
                 (CURRENT_WATERMARK(ts) IS NULL OR ts > CURRENT_WATERMARK(ts)) AS on_time
          FROM clicks_counted)""")
    t_env.execute_sql("CREATE TEMPORARY VIEW tagged_clicks_on_time AS SELECT * FROM tagged_clicks WHERE on_time")
    t_env.execute_sql(f"""
        CREATE TEMPORARY VIEW clicks_joined AS
        SELECT c.campaign_id AS campaign_id, c.ts AS ts
        FROM tagged_clicks c, (SELECT impression_id, rt AS its FROM first_seen WHERE kind = 'impression') i
        WHERE c.impression_id = i.impression_id AND c.billable AND c.reason IS NULL AND c.impression_ts IS NULL
          AND i.its BETWEEN c.ts - INTERVAL '{lifetime // 60_000}' MINUTE
                        AND c.ts + INTERVAL '{lateness // 60_000}' MINUTE""")


def _windows(t_env, clicks_view: str, name: str) -> None:
    """View `name`: per campaign and 10 s window, billable value and counts, invalid value, joined clicks, in up
    to two rows: FirstSeen's impressions, and the clicks summed in their own window. Python bills each part as
    it comes, which bills exactly what their sum would: min(a + b, what remains)."""
    seconds = clicks.WINDOW_MS // 1000
    t_env.execute_sql(f"""
        CREATE TEMPORARY VIEW {name} AS
        SELECT campaign_id, billable, impressions, clicks, invalid, invalid_events, CAST(0 AS BIGINT) AS joined, rt
        FROM first_seen WHERE kind = 'window'
        UNION ALL
        SELECT campaign_id,
               SUM(CASE WHEN billable AND reason IS NULL THEN price_micros ELSE 0 END) AS billable,
               SUM(CASE WHEN billable AND reason IS NULL AND event_type = 'IMPRESSION' THEN 1 ELSE 0 END)
                 AS impressions,
               SUM(CASE WHEN billable AND reason IS NULL AND event_type = 'CLICK' THEN 1 ELSE 0 END) AS clicks,
               SUM(CASE WHEN billable AND reason IS NOT NULL THEN price_micros ELSE 0 END) AS invalid,
               SUM(CASE WHEN reason IS NOT NULL THEN 1 ELSE 0 END) AS invalid_events,
               SUM(CASE WHEN joined THEN 1 ELSE 0 END) AS joined, window_time AS rt
        FROM TABLE(TUMBLE(TABLE {clicks_view}, DESCRIPTOR(ts), INTERVAL '{seconds}' SECOND))
        GROUP BY window_start, window_end, window_time, campaign_id""")


def _late_columns(decided: str) -> str:
    """A late event's columns of `reduced`: its decoded fields as JSON, with the `decided` ones (reason, joined)
    SQL named."""
    as_json = ", ".join(f"'{f}' VALUE {f}" for f in EVENT_FIELDS + tuple(decided.split(",")))
    return ", ".join([_NULL_LONG] * 6 + [_NULL_RAW, f"JSON_OBJECT({as_json})"])


def _reduced(t_env, campaign_header_hex: str) -> None:
    """Everything Python bills, as REDUCED_FIELDS rows with their rowtime."""
    raw = ", ".join([_NULL_LONG] * 6 + ["`topic`", "part", "off", "k", "v", "CAST(NULL AS STRING)"])
    t_env.execute_sql(f"""
        CREATE TEMPORARY VIEW reduced AS
        SELECT 'window' AS kind, campaign_id, billable, impressions, clicks, invalid, invalid_events, joined,
               CAST(NULL AS STRING) AS `topic`, CAST(NULL AS INT) AS part, CAST(NULL AS BIGINT) AS off,
               CAST(NULL AS BYTES) AS k, CAST(NULL AS BYTES) AS v, CAST(NULL AS STRING) AS event, rt
        FROM windows
        UNION ALL
        SELECT 'late', campaign_id, {_late_columns("reason")}, rt FROM first_seen WHERE kind = 'late'
        UNION ALL
        SELECT 'late', campaign_id, {_late_columns("reason,joined")}, ts FROM tagged_clicks WHERE NOT on_time
        UNION ALL
        SELECT 'joined', campaign_id, {_NULL_LONG}, {_NULL_LONG}, CAST(1 AS BIGINT), {", ".join([_NULL_LONG] * 3)},
               {_NULL_RAW}, CAST(NULL AS STRING), ts
        FROM clicks_joined
        UNION ALL
        SELECT 'raw', CAST(NULL AS BIGINT), {raw}, rt FROM first_seen WHERE kind = 'raw'
        UNION ALL
        SELECT 'campaign', campaign_of(v, X'{campaign_header_hex}'), {", ".join([_NULL_LONG] * 6)},
               `topic`, `partition`, `offset`, k, v, CAST(NULL AS STRING), ts FROM campaigns_in""")
