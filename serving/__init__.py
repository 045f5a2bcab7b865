"""The serving tier: ad server, tracker, advertiser API, prediction (later issues)."""
