"""The serving tier: the decision engine, the ad server, the tracker, the advertiser API and the prediction service."""
