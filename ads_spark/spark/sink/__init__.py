"""The Spark sink "ads": input validation, vectorised partitioning, batch and streaming writers.

Kept import-free so that format discovery (``pyspark_ads``) stays cheap.
"""
