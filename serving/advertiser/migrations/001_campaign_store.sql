-- The campaign store: what advertisers own and change. Never read on the serving path; changes reach the
-- ad servers through Debezium (cdc.public.*) and the index builder. Every change bumps `version`.
CREATE TABLE advertisers (
    advertiser_id bigserial PRIMARY KEY,
    name          text NOT NULL UNIQUE,
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    key_hash      bytea PRIMARY KEY,                 -- sha256 of the key; the key itself is never stored
    advertiser_id bigint NOT NULL REFERENCES advertisers,
    created_at    timestamptz NOT NULL DEFAULT now(),
    revoked_at    timestamptz
);

CREATE TABLE campaigns (
    campaign_id         bigserial PRIMARY KEY,
    advertiser_id       bigint NOT NULL REFERENCES advertisers,
    name                text NOT NULL,
    status              text NOT NULL CHECK (status IN ('ACTIVE', 'PAUSED', 'ENDED', 'REMOVED')),
    bid_type            text NOT NULL CHECK (bid_type IN ('CPM', 'CPC', 'CPA')),
    daily_budget_micros bigint NOT NULL CHECK (daily_budget_micros >= 0),
    currency            text NOT NULL,
    timezone            text NOT NULL,
    flight_start        timestamptz,
    flight_end          timestamptz,
    dayparts            jsonb NOT NULL DEFAULT '[]',
    cap_per_day         integer CHECK (cap_per_day > 0),
    cap_per_week        integer CHECK (cap_per_week > 0),
    cpa_target_micros   bigint CHECK (cpa_target_micros > 0),
    version             bigint NOT NULL DEFAULT 1,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CHECK (flight_end IS NULL OR flight_start IS NULL OR flight_end > flight_start)
);
CREATE INDEX campaigns_by_advertiser ON campaigns (advertiser_id);

CREATE TABLE ads (
    ad_id          bigserial PRIMARY KEY,
    campaign_id    bigint NOT NULL REFERENCES campaigns,
    advertiser_id  bigint NOT NULL REFERENCES advertisers,
    bid_type       text NOT NULL CHECK (bid_type IN ('CPM', 'CPC', 'CPA')),  -- the campaign's, fixed
    bid_micros     bigint NOT NULL CHECK (bid_micros > 0),
    quality_prior  double precision NOT NULL DEFAULT 0,
    creative_ref   text NOT NULL,
    landing_url    text NOT NULL,
    targeting      jsonb NOT NULL,                   -- the validated targeting form (core.targeting)
    status         text NOT NULL CHECK (status IN ('ACTIVE', 'PAUSED', 'REMOVED')),
    review_status  text NOT NULL CHECK (review_status IN ('PENDING', 'APPROVED', 'REJECTED')),
    version        bigint NOT NULL DEFAULT 1,
    updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ads_by_campaign ON ads (campaign_id);

-- Debezium reads these tables through one publication (created here, so the connector needs no
-- superuser rights); the full row image makes every update carry the whole row.
ALTER TABLE campaigns REPLICA IDENTITY FULL;
ALTER TABLE ads REPLICA IDENTITY FULL;
CREATE PUBLICATION adserve_cdc FOR TABLE campaigns, ads;
