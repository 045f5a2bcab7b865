"""A job's execution environment (checkpointed exactly-once, its restart strategy, the jars it ships) and its
start: run_job logs the settings (secrets masked), checks the brokers, builds the topology and runs it."""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from core.errors import InvalidSettings
from core.settings import describe
from jobs.common.settings import RESTART_STRATEGIES, KafkaJobSettings
from jobs.uids import assign_stable_uids
from streams.endpoints import check_kafka

TOLERABLE_CHECKPOINT_FAILURES = 3


def restart_options(settings: KafkaJobSettings) -> dict[str, str]:
    """The job's restart strategy as Flink configuration. Pure.

    fixed-delay (the default, and what tests and a laptop want): a bug fails the job visibly after
    `restart_attempts` restarts 2 s apart. exponential-delay (a cluster's, deploy/k8s): restarts without limit,
    the delay doubling from 1 s to 2 minutes with 10 % jitter and reset once the job has run an hour, so an outage
    of any length (a broker roll, an object store down) ends with the job running again."""
    if settings.restart_strategy == "exponential-delay":
        return {"restart-strategy.type": "exponential-delay",
                "restart-strategy.exponential-delay.initial-backoff": "1 s",
                "restart-strategy.exponential-delay.max-backoff": "2 min",
                "restart-strategy.exponential-delay.backoff-multiplier": "2.0",
                "restart-strategy.exponential-delay.reset-backoff-threshold": "1 h",
                "restart-strategy.exponential-delay.jitter-factor": "0.1",
                "restart-strategy.exponential-delay.attempts-before-reset-backoff": str(2**31 - 1)}
    if settings.restart_strategy != "fixed-delay":
        raise InvalidSettings(f"restart strategy {settings.restart_strategy!r}: one of {', '.join(RESTART_STRATEGIES)}")
    return {"restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": str(settings.restart_attempts),
            "restart-strategy.fixed-delay.delay": "2 s"}


def create_environment(settings: KafkaJobSettings, extra_jars: Sequence[Path] = ()):
    """A StreamExecutionEnvironment and its table environment, checkpointed exactly-once; `extra_jars`
    (the project's own JVM functions) are shipped with the job beside the Kafka connector."""
    from pyflink.common import Configuration
    from pyflink.datastream import CheckpointingMode, StreamExecutionEnvironment
    from pyflink.table import StreamTableEnvironment

    config = Configuration()
    config.set_string("python.executable", sys.executable)
    config.set_string("python.client.executable", sys.executable)
    config.set_string("python.state.cache-size", "100000")
    config.set_string("python.fn-execution.bundle.time", str(settings.bundle_time_ms))
    config.set_string("pipeline.name", settings.job_name)
    config.set_string("pipeline.auto-watermark-interval", f"{settings.watermark_interval_ms} ms")
    config.set_string("execution.buffer-timeout.interval", f"{settings.buffer_timeout_ms} ms")
    for key, value in restart_options(settings).items():
        config.set_string(key, value)
    if settings.state_changelog:
        config.set_string("state.changelog.enabled", "true")
    if settings.checkpoints_dir:
        config.set_string("execution.checkpointing.dir", settings.checkpoints_dir)
    if settings.savepoints_dir:
        config.set_string("execution.checkpointing.savepoint-dir", settings.savepoints_dir)
    if settings.tripwire_file:
        # A restart test run on the local mini-cluster gets a spare TaskManager: when a task fails, Flink's
        # shared Python resources may fail fatally while its operators close ("Reference count must not be
        # negative" in PythonSharedResources.close), which stops that TaskManager, and the restart would
        # wait in vain for a slot. Ignored by a real cluster, where jobs are submitted with `flink run`.
        config.set_string("minicluster.number-of-taskmanagers", "2")
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(settings.parallelism)
    env.enable_checkpointing(settings.checkpoint_interval_ms, CheckpointingMode.EXACTLY_ONCE)
    # A checkpoint that fails (a slow machine, a timeout) is skipped, not fatal: nothing is committed until the
    # next one completes, so exactly-once holds; three in a row fail the job into its restart strategy.
    env.get_checkpoint_config().set_tolerable_checkpoint_failure_number(TOLERABLE_CHECKPOINT_FAILURES)
    jar = Path(settings.connector_jar)
    if not jar.exists():
        raise FileNotFoundError(f"Flink Kafka connector jar not found: {jar}")
    env.add_jars(jar.resolve().as_uri(), *[Path(j).resolve().as_uri() for j in extra_jars])
    t_env = StreamTableEnvironment.create(env)
    # No source idle timeout: under backpressure (a slow Python operator) a partition that waits its turn
    # would be marked idle, the watermark would run ahead on the others, and its records would turn late.
    t_env.get_config().set("table.exec.source.idle-timeout", "0 ms")
    return env, t_env


def run_job(job_name: str, settings: Any, build: Callable[[Any, Any], None], *, extra_jars: Sequence[Path] = (),
            configure: Callable[[Any, Any], None] | None = None) -> None:
    """A job's start: its settings logged (secrets masked), a fresh environment (`configure(env, t_env)`
    adjusts it), the topology built by `build(t_env, settings)`, then run until cancelled."""
    logging.basicConfig(level=logging.INFO)
    logging.getLogger(f"adserve.jobs.{job_name}").info("starting %s: %s", job_name, describe(settings))
    if settings.kafka.endpoint is not None:  # a wrong broker, CA or password stops the job here, named
        check_kafka(settings.kafka.endpoint)
    env, t_env = create_environment(settings.kafka, extra_jars=extra_jars)
    if configure is not None:
        configure(env, t_env)
    build(t_env, settings)
    assign_stable_uids(env)  # a savepoint of this job restores into its next build (jobs/uids.py)
    env.execute(job_name)
