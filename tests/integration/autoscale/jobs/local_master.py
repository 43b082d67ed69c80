#
# A user's job that sets its own master in its code: streamscale attach refuses it in one
# line, before its session starts.
#
from pyspark.sql import SparkSession

if __name__ == "__main__":
    spark = SparkSession.builder.master("local[2]").appName("LocalJob").getOrCreate()
    print(spark.range(3).count())
    spark.stop()
