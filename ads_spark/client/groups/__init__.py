"""The Python consumer's consumer groups (Kafka's classic protocol): settings, coordinator link, membership.

``settings.py`` parses the group keys, ``coordinator.py`` finds and calls the group coordinator (and
commits and fetches offsets), ``membership.py`` joins, syncs, heartbeats and leaves. The assignors and
Kafka's subscription/assignment bytes are in ``client/assignors.py`` and ``client/consumer_protocol.py``.
``Consumer`` (client/consumer.py) is the user's entry point.
"""
