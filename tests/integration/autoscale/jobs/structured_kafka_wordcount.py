#
# A user's job, written as Spark's own example (examples/src/main/python/sql/streaming/
# structured_kafka_wordcount.py) is, with no import of streamscale: it counts the words of
# the lines it reads from Kafka and writes the running counts back to Kafka. A pandas UDF
# stands for the user's per-line work (a sleep per batch of lines: the machine has two cores,
# and a sleep per line would measure the scheduler's delays on a busy machine).
#
# Usage: structured_kafka_wordcount.py <bootstrap-servers> <subscribe-topic> <output-topic>
#        <checkpoint-location> <work-seconds-per-line>
#
import sys
import time

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.functions import explode, pandas_udf, split

if __name__ == "__main__":
    if len(sys.argv) != 6:
        print(
            "Usage: structured_kafka_wordcount.py <bootstrap-servers> <subscribe-topic> "
            "<output-topic> <checkpoint-location> <work-seconds-per-line>",
            file=sys.stderr,
        )
        sys.exit(-1)

    bootstrapServers, subscribeTopic, outputTopic, checkpoint = sys.argv[1:5]
    workSeconds = float(sys.argv[5])

    spark = SparkSession.builder.appName("StructuredKafkaWordCount").getOrCreate()

    @pandas_udf("string")
    def work(lines: pd.Series) -> pd.Series:
        time.sleep(len(lines) * workSeconds)
        return lines

    # Create DataSet representing the stream of input lines from kafka
    lines = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrapServers)
        .option("subscribe", subscribeTopic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 4000)
        .load()
        .selectExpr("CAST(value AS STRING)")
    )

    # Split the lines into words
    words = lines.select(explode(split(work(lines.value), " ")).alias("word"))

    # Generate running word count
    wordCounts = words.groupBy("word").count()

    # Start running the query that writes the running counts to Kafka
    query = (
        wordCounts.selectExpr("word AS key", "CAST(count AS STRING) AS value")
        .writeStream.outputMode("update")
        .format("kafka")
        .option("kafka.bootstrap.servers", bootstrapServers)
        .option("topic", outputTopic)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="1 second")
        .start()
    )

    query.awaitTermination()
