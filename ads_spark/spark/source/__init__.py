"""The Spark source "ads": options, offset planning (pure), schema, readers.

Kept import-free: Spark discovers the format through ``pyspark_ads``, which
imports ``ads_spark.spark.source.datasource``; nothing heavy may load on that path.
"""
