-- Advertiser reports: what the click aggregator billed (billing.billed_spend) and the conversions
-- (ad.conversions), landed by serving/report_landing and read by GET /v1/reports (docs/reporting.md).
--
-- The billed tables hold the aggregator's cumulative totals, never sums of deltas: each row is the newest
-- BilledSpend record of its bucket by core.clicks.progress_key (kept in progress_*), and a write replaces a row
-- only with a newer record. Landing the same records again, or in another order, leaves the same rows.
-- A budget day's row in report_billed_daily is its newest record: the one the nightly recount compares with.

-- The newest record of each (campaign, budget day, UTC hour of the record's interval end). An hour's figures
-- are the growth since the previous hour of the same budget day (core.reports.hourly_rows). The key's order
-- serves the hourly report's range scan (campaign, hour range).
CREATE TABLE report_billed_hourly (
    campaign_id               bigint NOT NULL,
    hour_start_ms             bigint NOT NULL,               -- UTC hour, epoch ms
    budget_day                date NOT NULL,                 -- in the campaign's time zone, as billed
    event_time_ms             bigint NOT NULL,               -- the record's event time (end of its interval)
    billed_spend_micros       bigint NOT NULL,
    billed_impressions        bigint NOT NULL,
    billed_clicks             bigint NOT NULL,
    absorbed_overspend_micros bigint NOT NULL,
    invalid_credit_micros     bigint NOT NULL,
    joined_clicks             bigint NOT NULL,
    progress_money            bigint NOT NULL,               -- core.clicks.progress_key's 2nd and 3rd terms
    progress_count            bigint NOT NULL,
    PRIMARY KEY (campaign_id, hour_start_ms, budget_day)
);

-- The newest record of each (campaign, budget day): the day's totals.
CREATE TABLE report_billed_daily (
    campaign_id               bigint NOT NULL,
    budget_day                date NOT NULL,
    event_time_ms             bigint NOT NULL,
    billed_spend_micros       bigint NOT NULL,
    billed_impressions        bigint NOT NULL,
    billed_clicks             bigint NOT NULL,
    absorbed_overspend_micros bigint NOT NULL,
    invalid_credit_micros     bigint NOT NULL,
    joined_clicks             bigint NOT NULL,
    progress_money            bigint NOT NULL,
    progress_count            bigint NOT NULL,
    PRIMARY KEY (campaign_id, budget_day)
);

-- One conversion per converting impression (a report sent twice has two conversion ids and one impression id):
-- the row is the dedupe, and the hourly counts grow only by rows inserted in the same transaction.
CREATE TABLE report_conversions (
    impression_id   text PRIMARY KEY,
    campaign_id     bigint NOT NULL,
    hour_start_ms   bigint NOT NULL,
    budget_day      date NOT NULL,
    event_time_ms   bigint NOT NULL
);

CREATE TABLE report_conversions_hourly (
    campaign_id     bigint NOT NULL,
    hour_start_ms   bigint NOT NULL,
    budget_day      date NOT NULL,
    conversions     bigint NOT NULL,
    PRIMARY KEY (campaign_id, hour_start_ms, budget_day)
);
CREATE INDEX report_conversions_hourly_by_day ON report_conversions_hourly (campaign_id, budget_day);

-- Where the landing job is in each topic partition, written in the transaction of the rows it landed: a
-- restarted job resumes exactly after the last batch that committed.
CREATE TABLE report_landing_offsets (
    consumer_group  text NOT NULL,
    topic           text NOT NULL,
    partition       integer NOT NULL,
    next_offset     bigint NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, topic, partition)
);
