"""A foreachBatch call interrupted by the query's stop (no services): what the speed layer raises
instead is short and still matches the pattern Spark's stream thread tells a stop by, so the stop is
not turned into a StackOverflowError by that pattern running over a whole JVM stack trace."""

from __future__ import annotations

import logging
import re
import traceback

from definitions.spark import BatchInterrupted, interrupted_call, quiet_interrupted_batches

# StreamExecution.PROXY_ERROR (Spark 4), written for Python's re.
PROXY_ERROR = re.compile(
    r"py4j.protocol.Py4JJavaError: An error occurred while calling((.|\r\n|\r|\n)*)"
    r"(java.lang.InterruptedException|java.io.InterruptedIOException|java.nio.channels.ClosedByInterruptException)"
)
JAVA_FRAMES = "".join(f"\n\tat org.apache.spark.Frame{i}.call(Frame.scala:{i})" for i in range(2_000))


class Py4JJavaError(Exception):
    """What py4j raises, as its text reads: the call, then the JVM exception with its stack trace."""

    def __init__(self, call: str, thrown: str) -> None:
        super().__init__()
        self.text = f"An error occurred while calling {call}.\n: {thrown}{JAVA_FRAMES}"

    def __str__(self) -> str:
        return self.text


def _as_the_jvm_reads_it(error: BaseException) -> str:
    try:
        raise error from None
    except BaseException:
        return traceback.format_exc()


def test_an_interrupted_call_becomes_a_short_error_spark_still_reads_as_a_stop():
    original = Py4JJavaError("o11201.collectToPython", "java.lang.InterruptedException")
    assert len(str(original)) > 50_000
    replaced = interrupted_call(original)
    assert isinstance(replaced, BatchInterrupted)
    text = _as_the_jvm_reads_it(replaced)
    assert len(text) < 2_000, text
    found = PROXY_ERROR.search(text)
    assert found is not None and len(found.group(1)) < 100, text


def test_any_other_error_is_left_as_it_is():
    assert interrupted_call(Py4JJavaError("o1.collectToPython", "org.apache.spark.SparkException: boom")) is None
    assert interrupted_call(ValueError("java.lang.InterruptedException")) is None
    assert interrupted_call(Py4JJavaError("o1.collectToPython", "java.lang.InterruptedExceptionX")) is None


def test_py4j_does_not_log_a_stop_as_an_error_but_still_logs_every_other_callback_error(caplog):
    quiet_interrupted_batches()
    quiet_interrupted_batches()  # once is enough: a second call adds nothing
    py4j = logging.getLogger("py4j.clientserver")
    assert len(py4j.filters) == 1
    for error in (
        BatchInterrupted("py4j.protocol.Py4JJavaError: ...\n: java.lang.InterruptedException"),
        KeyError("x"),
    ):
        try:
            raise error
        except Exception:
            py4j.error("There was an exception while executing the Python Proxy on the Python Side.", exc_info=True)
    assert [r.exc_info[1].__class__ for r in caplog.records if r.name == "py4j.clientserver"] == [KeyError]
