"""`report_landing`: the click aggregator's billed totals (billing.billed_spend) and the conversions
(ad.conversions) into the campaign store's report tables, for the advertiser API's reports. A plain Kafka
consumer, not a Flink job: it writes each batch and its Kafka offsets in one PostgreSQL transaction. The rules
(buckets, which record is newer) are core.reports; this package only reads, reduces and writes."""
