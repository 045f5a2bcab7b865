"""Flink job `event_counts`, the platform's smoke job: impressions, clicks and billable value per campaign
and event-time minute, ad.events -> ops.event_counts; corrupt or late records -> dead.letters. The counting
rule is core.event_counts; this package only wires it to Kafka and Flink state."""
