"""Archive a topic to a Parquet dataset on any fsspec URL, exactly once per offset.

    python jobs/archive.py --bootstrap-servers 127.0.0.1:9092 --topic orders \
        --url file:///data/orders-archive --checkpoint /data/orders-archive-ckpt [--available-now] \
        [--command-config client.properties]

Without ``--bootstrap-servers`` it archives from the cluster of ``ads cluster up`` in ``--dir`` (default
./state), with the client config (TLS settings) that cluster wrote there; ``--command-config`` names a
client properties file (``security.protocol``, ``ssl.*``, ``sasl.*``), passed to the reader with ``ads.``.

A streaming query reads the topic (``readStream.format("ads")``) and, for each
micro-batch, every executor task writes the rows of its offset range with
pyarrow to ``<url>/topic=<t>/partition=<p>/<first offset>-<last offset>.parquet``.
The file name is a function of the offsets alone, and Spark re-executes a
micro-batch over exactly the offsets its checkpoint recorded, so a replayed batch
rewrites the same files instead of adding new ones: a Parquet reader of the
dataset sees each offset once. Any fsspec URL works (``s3://``, ``gs://``, ...)
when its fsspec backend is installed; a plain path means the local disk.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ads_spark.archive import start_archive  # noqa: E402
from ads_spark.cli.common import DEFAULT_STATE_DIR, resolve_client_config  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", default=None, help="default: the cluster of `ads cluster up` in --dir")
    parser.add_argument("--dir", default=str(DEFAULT_STATE_DIR), help="state dir of `ads cluster up`")
    parser.add_argument("--command-config", default=None, metavar="FILE", help="client properties (TLS, SASL)")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--url", required=True, help="fsspec URL or local path of the Parquet dataset")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--available-now", action="store_true", help="archive what is there now, then stop")
    args = parser.parse_args()
    client = resolve_client_config(args.bootstrap_servers, args.command_config, Path(args.dir))
    bootstrap = client.pop("bootstrap.servers")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("ads-archive").config("spark.ui.showConsoleProgress", "false").getOrCreate()
    query = start_archive(spark, bootstrap, args.topic, args.url, args.checkpoint, args.available_now,
                          options={f"ads.{key}": value for key, value in client.items()})
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
