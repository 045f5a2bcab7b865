"""Flink job `index_builder`: the campaign store's change streams (cdc.public.*) -> the flat serving records
(serving.ads, serving.campaigns, serving.reserves), newest version per row. The compile rules are
core.campaigns' and core.reserves'. Snapshots for the servers' fast boot are not this job's: serving.snapshots
writes them in its own process. See docs/campaign-changes.md."""
