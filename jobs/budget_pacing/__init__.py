"""The Flink job `budget_pacing`: spend, campaign, ad and billing records in; budget states, slices and the
dashboards' pacing curves out. Keyed by campaign shard, on event time; every rule it applies is in
core.budget_events (docs/pacing.md, "The budget pacing job"). Run: `adserve jobs deploy budget_pacing`."""
