"""The Spark data source "ads": the entry point Spark instantiates for reads and writes.

Owns the mapping from Spark's calls (schema, reader, streamReader, writer,
streamWriter) to this package's readers (``ads_spark.spark.source``) and writers
(``ads_spark.spark.sink``). Options are validated here, in the call Spark makes when
the user calls ``load()`` / ``save()`` / ``start()``, so a bad option fails
before any task runs and before any connection is opened.

Import-light on purpose: Spark imports every top-level ``pyspark_*`` module in
a Python worker to discover data sources (``pyspark_ads`` re-exports this
class as ``DefaultSource``), so this module imports only pyspark's base class;
pyarrow, Flight and the client load when a reader or writer is made.

SASL: pyspark pickles this instance into the read function it ships to executors (after ``reader``
or ``streamReader`` returns), so once a reader holds the login (in this driver process) the login
options are dropped from ``self.options`` (``_forget_login``); the password never reaches a task.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource

FORMAT_NAME = "ads"
# The options that carry who the driver logs in as (spark.options.LOGIN_KEYS with the ads. prefix).
_LOGIN_OPTIONS = ("ads.sasl.username", "ads.sasl.password", "ads.sasl.jaas.config")


class AdsDataSource(DataSource):
    """``spark.read/readStream.format("ads")`` and ``df.write/writeStream.format("ads")``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def _source_options(self, streaming: bool | None):
        from ads_spark.spark.source.options import parse_source_options

        return parse_source_options(self.options, streaming=streaming)

    def schema(self):
        """Called at ``load()`` for reads only: the place to reject bad source options early."""
        from ads_spark.spark.source.schema import spark_schema

        return spark_schema(self._source_options(streaming=None).include_headers)

    def _forget_login(self) -> None:
        for key in _LOGIN_OPTIONS:
            if key in self.options:
                del self.options[key]

    def reader(self, schema):
        from ads_spark.spark.source.reader import AdsBatchReader
        from ads_spark.spark.source.schema import check_user_schema

        options = self._source_options(streaming=False)
        check_user_schema(schema, options.include_headers)
        made = AdsBatchReader(options)
        self._forget_login()
        return made

    def streamReader(self, schema):
        from ads_spark.errors import InvalidConfigError
        from ads_spark.spark.source.reader import AdsStreamReader, RejectedStreamReader
        from ads_spark.spark.source.schema import check_user_schema

        try:
            options = self._source_options(streaming=True)
            check_user_schema(schema, options.include_headers)
        except InvalidConfigError as exc:
            self._forget_login()
            return RejectedStreamReader(exc)
        made = AdsStreamReader(options)
        self._forget_login()
        return made

    def writer(self, schema, overwrite: bool):
        from ads_spark.spark.sink.writer import AdsBatchWriter

        return AdsBatchWriter.create(self.options, schema, overwrite)

    def streamWriter(self, schema, overwrite: bool):
        from ads_spark.spark.sink.writer import AdsStreamWriter

        return AdsStreamWriter.create(self.options, schema, overwrite)
