"""Flink job `click_aggregator`: ad.events -> deduplicated, tagged, billed up to the budget ->
billing.billed_spend (per campaign, every 10 s of event time). Per-event work runs in the JVM (views);
Python bills the reduced rows with core.clicks (functions). How and why: docs/billing.md."""
