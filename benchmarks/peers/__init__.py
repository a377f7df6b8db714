"""Peer systems for `python -m benchmarks.compare`: local 3-node NATS JetStream and RabbitMQ clusters.

Installed by ``benchmarks/peers/install.sh``; each module starts its cluster on
127.0.0.1 with ports chosen at run time and removes every process and data dir
it created. Not part of CI.
"""
