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
        """Called at ``load()`` for reads only (not when the user gives ``.schema(...)``): the place to
        reject bad source options early, and to learn whether the topic is typed (its columns, then)."""
        from ads_spark.spark.source.schema import spark_schema

        options = self._source_options(streaming=None)
        typed = self._typed(options)
        return typed.spark_schema() if typed is not None else spark_schema(options.include_headers)

    def _typed(self, options):
        """The typed read (spark/source/typed.py), asked of the brokers once per DataFrame: kept on this
        instance, which Spark pickles into the reader's process after ``schema()``."""
        if "_typed_source" not in self.__dict__:
            from ads_spark.spark.source.typed import typed_source

            self._typed_source = typed_source(options, self.options)
        return self._typed_source

    def _with_typed(self, options, schema):
        """``options`` carrying the typed read narrowed to a user ``.schema(...)``; for a Kafka-shaped read
        the user schema must be Kafka's."""
        from dataclasses import replace

        from ads_spark.spark.source.schema import check_user_schema
        from ads_spark.spark.source.typed import narrowed

        typed = self._typed(options)
        if typed is None:
            check_user_schema(schema, options.include_headers)
            return options
        return replace(options, typed=narrowed(typed, schema))

    def _forget_login(self) -> None:
        for key in _LOGIN_OPTIONS:
            if key in self.options:
                del self.options[key]

    def reader(self, schema):
        from ads_spark.spark.options import lower_keys, option_bool
        from ads_spark.spark.source.reader import AdsBatchReader, AdsFilteringBatchReader

        options = self._with_typed(self._source_options(streaming=False), schema)
        # pushFilters only when asked: Spark refuses a reader that overrides it while its conf is off.
        push = option_bool(lower_keys(self.options), "pushfilters", "pushFilters", False)
        made = AdsFilteringBatchReader(options) if push else AdsBatchReader(options)
        self._forget_login()
        return made

    def streamReader(self, schema):
        from ads_spark.errors import InvalidConfigError
        from ads_spark.spark.options import lower_keys
        from ads_spark.spark.source.reader import AdsStreamReader, RejectedStreamReader

        try:
            options = self._with_typed(self._source_options(streaming=True), schema)
            if "pushfilters" in lower_keys(self.options):
                raise InvalidConfigError("option 'pushFilters' is for batch reads (Spark pushes no filters to "
                                         "streaming sources); use the option 'filter'")
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
