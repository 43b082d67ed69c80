"""Small files in a query's checkpoint, on any Hadoop file system (local, HDFS, S3...).

The pipelines keep a little state of their own next to Spark's (the enrichment reads the
offset log; game sessions save their pending headers and open sessions per batch). Going
through Hadoop's ``FileSystem`` of the session means a checkpoint on S3 or HDFS works as a
local one does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _fs(spark: SparkSession, path: str) -> tuple[Any, Any]:
    jvm: Any = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    return hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), hadoop_path


def read_bytes(spark: SparkSession, path: str) -> bytes | None:
    """The file's bytes, or None when it does not exist."""
    fs, hadoop_path = _fs(spark, path)
    if not fs.exists(hadoop_path):
        return None
    stream = fs.open(hadoop_path)
    try:
        jvm: Any = spark.sparkContext._jvm
        return bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
    finally:
        stream.close()


def read_text(spark: SparkSession, path: str) -> str:
    """A small UTF-8 text file (it must exist)."""
    data = read_bytes(spark, path)
    if data is None:
        raise FileNotFoundError(path)
    return data.decode("utf-8")


def write_bytes(spark: SparkSession, path: str, data: bytes) -> None:
    """Write ``path`` whole or not at all: a temporary file, then a rename."""
    fs, hadoop_path = _fs(spark, path)
    _, temporary = _fs(spark, path + ".tmp")
    stream = fs.create(temporary, True)
    try:
        stream.write(bytearray(data))
    finally:
        stream.close()
    if fs.exists(hadoop_path):
        fs.delete(hadoop_path, False)
    if not fs.rename(temporary, hadoop_path):
        raise OSError(f"could not rename {path}.tmp to {path}")


def delete(spark: SparkSession, path: str) -> None:
    """Remove ``path`` if it exists."""
    fs, hadoop_path = _fs(spark, path)
    if fs.exists(hadoop_path):
        fs.delete(hadoop_path, False)
