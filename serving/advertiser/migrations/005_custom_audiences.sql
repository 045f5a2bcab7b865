-- Custom audiences: an advertiser's named list of people, uploaded as hashes (core/audiences.py). The advertiser
-- sends the SHA-256 of each normalised email or device id; the API keys it with the platform's secret salt
-- (HMAC-SHA256) before anything is written, so no table holds a clear id or a hash that joins with another
-- data set. The ad servers match on the same keys in Redis (`audiences:{member_key}`, docs/storage.md), which
-- the API writes after the members commit here; these tables are the record an audience is rebuilt from.
-- Not published to CDC: nothing on the serving path reads them.
CREATE TABLE audiences (
    audience_id   bigserial PRIMARY KEY,
    advertiser_id bigint NOT NULL REFERENCES advertisers,
    name          text NOT NULL,
    member_count  bigint NOT NULL DEFAULT 0 CHECK (member_count >= 0),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (advertiser_id, name)
);

CREATE TABLE audience_members (
    audience_id bigint NOT NULL REFERENCES audiences,
    member_key  bytea NOT NULL CHECK (length(member_key) = 32),  -- HMAC-SHA256(salt, uploaded SHA-256)
    added_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (audience_id, member_key)
);
COMMENT ON COLUMN audience_members.member_key IS
    'HMAC-SHA256 under the platform''s secret salt of the SHA-256 the advertiser uploaded; never a clear id';
