-- What only the platform sets: the quality term, the review of ads, reserves; and API keys an operator can
-- revoke and rotate. Advertisers' rows keep their data.

-- Quality is the platform's estimate, never the advertiser's: every advertiser-set value goes back to the
-- platform's default (0: the placement's default quality applies). The version bump sends each changed ad
-- through CDC and the index builder, so the ad servers drop the old value too.
UPDATE ads SET quality_prior = 0, version = version + 1, updated_at = now() WHERE quality_prior <> 0;
COMMENT ON COLUMN ads.quality_prior IS
    'The platform''s per-ad quality adjustment (micros per impression) on top of the placement default; '
    'written only by the platform, never by the advertiser API';

-- Review belongs to the platform: new ads wait for an operator, who is recorded with the time.
ALTER TABLE ads ALTER COLUMN review_status SET DEFAULT 'PENDING';
ALTER TABLE ads ADD COLUMN reviewed_by text, ADD COLUMN reviewed_at timestamptz, ADD COLUMN review_note text;
CREATE TABLE ad_reviews (
    review_id   bigserial PRIMARY KEY,
    ad_id       bigint NOT NULL REFERENCES ads,
    ad_version  bigint NOT NULL,                     -- the version the reviewer decided on
    decision    text NOT NULL CHECK (decision IN ('APPROVED', 'REJECTED')),
    reviewer    text NOT NULL,
    note        text,
    decided_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ad_reviews_by_ad ON ad_reviews (ad_id);
CREATE INDEX ads_pending ON ads (updated_at) WHERE review_status = 'PENDING';

-- API keys: an id and a recognisable prefix to name one by, and who revoked it.
ALTER TABLE api_keys ADD COLUMN key_id bigserial UNIQUE, ADD COLUMN key_prefix text, ADD COLUMN revoked_by text;

-- Reserves, quality floors and default quality per (placement, country); '*' stands for any. A NULL value is
-- taken from a less specific rule (core.reserves). Rows are never deleted: `removed` retires one, so the
-- change reaches the ad servers through CDC like any other.
CREATE TABLE reserves (
    placement              text NOT NULL,
    country                text NOT NULL,
    reserve_micros         bigint CHECK (reserve_micros >= 0),
    quality_floor_micros   bigint,
    default_quality_micros bigint,
    removed                boolean NOT NULL DEFAULT false,
    set_by                 text NOT NULL,
    version                bigint NOT NULL DEFAULT 1,
    updated_at             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (placement, country)
);
ALTER TABLE reserves REPLICA IDENTITY FULL;
ALTER PUBLICATION adserve_cdc ADD TABLE reserves;
