"""The Spark session of a job: ``local[*]`` by default, any cluster with ``--master``.

Spark's own output stays out of the user's terminal: the JVM (driver, and the
executors of a local master) writes its log to a file (``spark.log`` in the job's
output directory, or one the caller names) at level WARN, the console progress bar
is off, and the job reports its own progress (``metastore.pipeline.progress``).
The Python workers run this interpreter, so they import the same ``metastore``, unless
the operator names another in ``PYSPARK_PYTHON``: on a cluster whose hosts keep the
package at another path, the executors' workers run that one (the driver is always
this process's own).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import IO, Any

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from metastore.pipeline.options import DEFAULT_MASTER, executor_python

LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = error
logger.nativeio.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativeio.level = error
logger.utils.name = org.apache.spark.util.Utils
logger.utils.level = error
"""


def conf(master: str, app_name: str, log4j_file: Path, partitions: int | None = None) -> SparkConf:
    """The settings every job runs with (``partitions``: shuffle and default parallelism)."""
    java = f"-Dlog4j2.configurationFile=file:{log4j_file}"
    settings = {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": java,
        "spark.executor.extraJavaOptions": java,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.pyspark.python": executor_python(master),
        "spark.pyspark.driver.python": sys.executable,
    }
    if partitions is not None:
        settings["spark.sql.shuffle.partitions"] = str(partitions)
        settings["spark.default.parallelism"] = str(partitions)
    spark_conf = SparkConf(loadDefaults=False)
    for key, value in settings.items():
        spark_conf.set(key, value)
    return spark_conf


def start(
    master: str = DEFAULT_MASTER,
    app_name: str = "metastore",
    log_path: Path | None = None,
    partitions: int | None = None,
) -> SparkSession:
    """A new session whose JVM writes its log to ``log_path`` (a temporary file if None).

    The caller stops it (``session.stop()``); one process holds one session.
    """
    return SparkSession(start_context(master, app_name, log_path, partitions))


def start_context(
    master: str = DEFAULT_MASTER,
    app_name: str = "metastore",
    log_path: Path | None = None,
    partitions: int | None = None,
) -> SparkContext:
    """``start`` without the SQL session, for a job of plain RDDs (``rebuild``): the
    session's own start-up costs seconds it would not use. The caller stops it."""
    if master.startswith("local"):
        # the machine's name may resolve to a loopback address: Spark warns, then binds
        # to whatever interface it finds; a local job needs none
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if log_path is None:
        log_path = Path(tempfile.mkdtemp(prefix="metastore-spark-")) / "spark.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log4j_file = log_path.with_suffix(".log4j2.properties")
    log4j_file.write_text(LOG4J2)
    spark_conf = conf(master, app_name, log4j_file, partitions)
    log: IO[bytes] = log_path.open("ab")
    try:
        launch: Any = launch_gateway  # untyped in pyspark
        gateway = launch(spark_conf, popen_kwargs={"stdout": log, "stderr": log})
    finally:
        log.close()  # the JVM holds its own descriptor
    context = SparkContext(conf=spark_conf, gateway=gateway)
    context.setLogLevel("WARN")
    return context
