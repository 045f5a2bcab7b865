-- When each campaign's daily budget was changed: the advertiser API refuses a budget change past
-- core.campaigns.BUDGET_EDITS_PER_HOUR in the last hour (429 naming daily_budget_micros). Rows older than a
-- day are deleted as new ones are written. Not published to CDC: only the API reads it.
CREATE TABLE campaign_budget_edits (
    campaign_id  bigint NOT NULL REFERENCES campaigns,
    edited_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX campaign_budget_edits_by_campaign ON campaign_budget_edits (campaign_id, edited_at);
