-- An audience is matched by the ad servers only once it holds core.audiences.MIN_AUDIENCE_MEMBERS members.
-- `live`: its members are in Redis (the API sets it after writing every member there, and clears it after
-- removing them all when a removal takes the audience under the minimum). An audience made before this column
-- had its members written to Redis at upload, so it starts live; the next upload or removal on one under the
-- minimum unlinks it.
ALTER TABLE audiences ADD COLUMN live boolean NOT NULL DEFAULT false;
UPDATE audiences SET live = member_count > 0;
