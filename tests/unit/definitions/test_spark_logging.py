"""What a platform session's driver logs: warnings, but not the trigger's overrun at every micro-batch."""

from __future__ import annotations

from definitions.spark import TRIGGER_OVERRUN_LOGGER


def test_a_micro_batch_longer_than_the_trigger_is_not_a_warning(spark):
    """speed.trigger_s (0.25 s) is shorter than an idle micro-batch (~0.4 s): Spark's trigger would
    warn "Current batch is falling behind" at every one (1,159 lines in one test run)."""
    jvm = spark.sparkContext._jvm
    jvm.java.lang.Class.forName(TRIGGER_OVERRUN_LOGGER)  # the class still exists under this name
    log4j = jvm.org.apache.logging.log4j
    overrun = log4j.LogManager.getLogger(TRIGGER_OVERRUN_LOGGER)
    assert not overrun.isEnabled(log4j.Level.WARN)
    assert overrun.isEnabled(log4j.Level.ERROR)


def test_other_warnings_are_still_logged(spark):
    log4j = spark.sparkContext._jvm.org.apache.logging.log4j
    assert log4j.LogManager.getLogger("org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution").isEnabled(
        log4j.Level.WARN
    )
    assert not log4j.LogManager.getRootLogger().isEnabled(log4j.Level.INFO)
