"""Makes ``format("ads")`` resolve with no registration call.

Spark imports every top-level module named ``pyspark_*`` and registers its
``DefaultSource`` under ``DefaultSource.name()``. This module only re-exports
the data source class; the class itself imports nothing heavy until Spark asks
it for a reader or writer.
"""

from ads_spark.spark.source.datasource import AdsDataSource as DefaultSource

__all__ = ["DefaultSource"]
