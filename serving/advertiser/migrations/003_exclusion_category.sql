-- Competitive exclusion: a campaign declares a content category (0: none), and two ads whose campaigns share a
-- nonzero category never share a page (core.auction), e.g. two car brands' campaigns. Advertisers set it.
--
-- Each ad carries a copy of its campaign's category, so the index builder compiles it into the ad's serving
-- record from the ad's own change, without a join. The store keeps the copy in step (serving/advertiser/store.py):
-- a new ad takes its campaign's, and a change of the campaign's rewrites every ad of the campaign with a new
-- version in the same transaction, which sends each through CDC and the index builder to the ad servers.
-- Existing rows get 0, what the servers apply today, so nothing needs a new version here.
ALTER TABLE campaigns ADD COLUMN exclusion_category integer NOT NULL DEFAULT 0 CHECK (exclusion_category >= 0);
COMMENT ON COLUMN campaigns.exclusion_category IS
    'Competitive-exclusion category declared by the advertiser (0: none): ads of two campaigns of the same '
    'nonzero category never share a page';
ALTER TABLE ads ADD COLUMN exclusion_category integer NOT NULL DEFAULT 0 CHECK (exclusion_category >= 0);
COMMENT ON COLUMN ads.exclusion_category IS
    'The campaign''s exclusion_category, kept in step by the store (written when the ad is created and whenever '
    'the campaign''s changes); never set on its own';
