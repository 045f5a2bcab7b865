"""The budget job's wiring: Kafka sources and sinks, the JVM's spend reduction, the keying by campaign shard and
the pacer. No rule and no host, port or path: those come from the settings (jobs.budget_pacing.settings)."""
from __future__ import annotations

from core import budget
from jobs.budget_pacing.functions import LEASES, ROW_FIELDS, Pace, PacerSettings, Route
from jobs.budget_pacing.settings import BudgetPacingSettings
from jobs.common.kafka_tables import bytes_row_type, kafka_sink_table, kafka_source_table, single_object_header
from jobs.common.routing import DEAD_LETTERS
from jobs.common.shards import by_campaign_shard
from schemas import topics

SERVER_WINDOW_MS = 1000  # metered reports reach the pacer per server once a second of event time
# The SpendReport layout before `released`: the JVM still reads it, so ad servers not yet upgraded keep drawing and
# asking for slices there while a rollout replaces them (they hand nothing back).
EARLIER_SPEND_REPORT = "spend_report.v3.avsc"
# Each side input's record type: its topic's (schemas.topics)
SIDE_INPUTS = {table: topics.record_type(topic) for table, topic in (
    ("campaigns_in", topics.SERVING_CAMPAIGNS), ("billed_in", topics.BILLED_SPEND), ("ads_in", topics.SERVING_ADS))}


def row_type():
    """The JVM's rows (io.adserve.flink.SpendWindows.OUTPUT_TYPE), by name."""
    from pyflink.common import Types

    return Types.ROW_NAMED(ROW_FIELDS, [
        Types.STRING(), Types.LONG(), Types.STRING(), Types.STRING(), Types.LONG(), Types.LONG(), Types.LONG(),
        Types.LONG(), Types.LONG(), Types.BOOLEAN(), Types.STRING(), Types.INT(), Types.LONG(),
        Types.PRIMITIVE_ARRAY(Types.BYTE()), Types.PRIMITIVE_ARRAY(Types.BYTE()), Types.BOOLEAN()])


def history_header(file_name: str) -> str:
    """The hex of the single-object header of an earlier schema version (schemas/history), fingerprinted as the
    codec's registry fingerprints every version."""
    import json

    from schemas import HISTORY_DIR
    from schemas.codec import MAGIC, SchemaRegistry

    return (MAGIC + SchemaRegistry().register(json.loads((HISTORY_DIR / file_name).read_text()))).hex()


def build(t_env, settings: BudgetPacingSettings) -> None:
    """Sources -> the JVM's reduction -> keyed by campaign shard -> the pacer -> sinks."""
    _tables(t_env, settings)
    _reduce_spend(t_env, budget.STEP_MS // 1000)
    # Campaign and billing records are keyed where they stand (their campaign id read in the JVM): one that went
    # its own way through Python could be overtaken by the spend behind it. Only late reports and records the
    # JVM cannot read pass through Route.
    routed, keyed = by_campaign_shard(t_env.to_data_stream(t_env.from_path("reduced")), row_type(), settings.shards,
                                      Route(), "decode late and unreadable records")
    pacer = PacerSettings(settings.shards, settings.heartbeat_ms, settings.curves, settings.redis_url,
                          settings.kafka.tripwire_file)
    paced = keyed.process(Pace(pacer), output_type=bytes_row_type()).name("pace campaigns").uid("pace-campaigns")
    statements = t_env.create_statement_set()
    statements.add_insert("state_out", t_env.from_data_stream(paced))
    statements.add_insert("leases_out", t_env.from_data_stream(paced.get_side_output(LEASES)))
    statements.add_insert("dead_letters_out", t_env.from_data_stream(
        routed.get_side_output(DEAD_LETTERS).union(paced.get_side_output(DEAD_LETTERS))))
    statements.attach_as_datastream()


def _tables(t_env, settings: BudgetPacingSettings) -> None:
    kafka, names = settings.kafka, settings.topics
    kafka_source_table(t_env, "spend_in", names.spend, kafka, out_of_orderness_ms=settings.out_of_orderness_ms)
    for name, topic in (("campaigns_in", names.campaigns), ("billed_in", names.billed), ("ads_in", names.ads)):
        kafka_source_table(t_env, name, topic, kafka, idle_timeout_ms=settings.idle_timeout_ms, side_input=True)
    # States and slices are idempotent for their readers (latest state wins; a lease id counts once), so
    # at-least-once sinks: visible at once instead of at the next checkpoint.
    kafka_sink_table(t_env, "state_out", names.state, kafka, exactly_once=False)
    kafka_sink_table(t_env, "leases_out", names.leases, kafka, exactly_once=False)
    kafka_sink_table(t_env, "dead_letters_out", names.dead_letters, kafka)


def _reduce_spend(t_env, window_s: int) -> None:
    """The JVM part: budget.spend decoded, deduplicated and summed by io.adserve.flink.SpendWindows (jobs/jvm),
    chained to the Kafka source; campaign, ad and billing records get their campaign id there. View `reduced`."""
    from pyflink.datastream import DataStream
    from pyflink.table import Schema
    from pyflink.util.java_utils import invoke_method

    spend = t_env.to_data_stream(t_env.from_path("spend_in"))
    options = (f"{single_object_header(topics.record_type(topics.BUDGET_SPEND))},{window_s * 1000},{SERVER_WINDOW_MS},"
               f"{history_header(EARLIER_SPEND_REPORT)}")
    windows = invoke_method(None, "io.adserve.flink.SpendWindows", "apply", [spend._j_data_stream, options],
                            ["org.apache.flink.streaming.api.datastream.DataStream", "java.lang.String"])
    t_env.create_temporary_view("spend_reduced", t_env.from_data_stream(
        DataStream(windows).uid("spend-windows"),
        Schema.new_builder().column_by_metadata("rt", "TIMESTAMP_LTZ(3)", "rowtime")
        .watermark("rt", "SOURCE_WATERMARK()").build()))
    t_env.execute_sql(_reduced_view_sql())


def _reduced_view_sql() -> str:
    """The reduced spend rows and the side inputs' records (their campaign id read by campaign_of) as one view."""
    nulls = ", ".join(["CAST(NULL AS BIGINT)"] * 5)
    columns = ", ".join(f"`{name}`" for name in ROW_FIELDS)
    side = {"campaigns_in": ("'campaign'", ""), "billed_in": ("'billed'", ""), "ads_in": ("'ad'", ", 1")}
    selects = [f"SELECT {columns}, rt FROM spend_reduced"] + [
        f"""SELECT {kind}, campaign_of(v, X'{single_object_header(SIDE_INPUTS[table])}'{extra}),
               CAST(NULL AS STRING), CAST(NULL AS STRING), {nulls}, CAST(NULL AS BOOLEAN), `topic`, `partition`,
               `offset`, k, v, CAST(NULL AS BOOLEAN), ts FROM {table}"""
        for table, (kind, extra) in side.items()]
    return "CREATE TEMPORARY VIEW reduced AS\n" + "\nUNION ALL\n".join(selects)
