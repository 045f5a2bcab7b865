"""Flink job `features`: the ad-feature snapshot from the platform's own traffic. ad.served, ad.events,
ad.conversions, ad.feedback, serving.ads and serving.campaigns in; every 5 minutes of event time a snapshot
file ad-features-v{version}.npz, the changed ads' rows on features.ads and the FEATURES entry on model.registry
out; consented users' click features into Redis. Every rule is core's (core.feature_windows, core.ad_stats,
core.ad_content, core.feature_inputs, core.user_activity); this package only wires them to Kafka, Flink state,
the snapshot folder and Redis. See docs/features.md."""
