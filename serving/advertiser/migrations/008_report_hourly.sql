-- The hourly report as it is read: one row per (campaign, UTC hour) with the hour's figures, kept by
-- serving/report_landing in the same transaction as the rows they come from (docs/reporting.md). An hour's billed
-- figures are the growth of each budget day's cumulative totals (report_billed_hourly) since the previous hour of
-- that day, summed over the budget days in the hour; its conversions are report_conversions_hourly's, summed the
-- same way (core.reports.hourly_rows states the rule). A report is then a range scan of this key.
CREATE TABLE report_hourly (
    campaign_id          bigint NOT NULL,
    hour_start_ms        bigint NOT NULL,
    billed_impressions   bigint NOT NULL,
    billed_clicks        bigint NOT NULL,
    conversions          bigint NOT NULL,
    billed_spend_micros  bigint NOT NULL,
    PRIMARY KEY (campaign_id, hour_start_ms)
);

-- The landing reads a budget day's hours again after each batch that changes one of them.
CREATE INDEX report_billed_hourly_by_day ON report_billed_hourly (campaign_id, budget_day);

-- What the tables already hold.
WITH growth AS (
    SELECT campaign_id, hour_start_ms,
           billed_impressions - coalesce(lag(billed_impressions) OVER day, 0) AS impressions,
           billed_clicks - coalesce(lag(billed_clicks) OVER day, 0) AS clicks,
           billed_spend_micros - coalesce(lag(billed_spend_micros) OVER day, 0) AS spend
    FROM report_billed_hourly
    WINDOW day AS (PARTITION BY campaign_id, budget_day ORDER BY hour_start_ms)),
parts AS (
    SELECT campaign_id, hour_start_ms, impressions, clicks, 0::bigint AS conversions, spend FROM growth
    UNION ALL
    SELECT campaign_id, hour_start_ms, 0, 0, conversions, 0 FROM report_conversions_hourly)
INSERT INTO report_hourly (campaign_id, hour_start_ms, billed_impressions, billed_clicks, conversions,
                           billed_spend_micros)
SELECT campaign_id, hour_start_ms, sum(impressions), sum(clicks), sum(conversions), sum(spend)
FROM parts GROUP BY campaign_id, hour_start_ms;
