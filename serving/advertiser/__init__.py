"""The advertiser API and the PostgreSQL campaign store behind it."""
