"""What a consumer's fetch of a typed topic sends: stored batches read as one schema version, projected, and
the batches its filters' statistics rule out left out (``schemas/projection.py`` holds the rule, shared with
the local read path; this module binds it to the broker's schema cache and to a fetch request).

The answer's Arrow schema is fixed for the whole fetch or fetch session (``projected_schema``), so Flight
sends every batch in one stream; a batch stored in the read version leaves as a selection of its mapped
buffers, so only the asked columns' bytes leave the broker. Offsets are never filtered or renumbered: a
skipped batch still moves the reader's next offset, and a replay reads the same rows.
"""

from __future__ import annotations

from ads_spark.config_schemas import ARROW, schema_type
from ads_spark.errors import InvalidRequestError, UnknownTopicOrPartitionError
from ads_spark.protocol.typed_records import META_COLUMNS
from ads_spark.schemas.projection import ProjectedRead


class TypedRead(ProjectedRead):
    """One typed read on a broker: ``ProjectedRead`` over the broker's ``SchemaCache`` (``schema`` is what every
    batch of its answers is in)."""

    def __init__(self, topic: str, topic_id: str, version: int, columns: list[str] | None, schemas,
                 filters: list | None = None, meta: tuple[str, ...] | list[str] = META_COLUMNS):
        self.topic_id = topic_id
        try:
            schemas.user_schema(topic, topic_id, version)
        except UnknownTopicOrPartitionError as exc:  # not retriable: asking again will not register it
            raise InvalidRequestError(f"typed read of topic '{topic}': {exc.message or exc}") from None
        super().__init__(topic, version, columns, lambda v: schemas.user_schema(topic, topic_id, v), filters, meta)

    @classmethod
    def from_request(cls, typed: dict, broker) -> "TypedRead":
        """The read a fetch request's ``typed`` field asks for (checked by ``request_schemas.TYPED_READ``)."""
        topic = typed["topic"]
        known = broker.metadata.topics.get(topic)
        if known is None or not known.get("topic_id"):
            raise UnknownTopicOrPartitionError(f"topic '{topic}' is not known to this broker")
        if schema_type(broker.topic_config(topic)) != ARROW:
            raise InvalidRequestError(f"topic '{topic}' is not typed (schema.type=kafka): read it without 'typed'")
        return cls(topic, known["topic_id"], typed["version"], typed.get("columns"), broker.schemas,
                   typed.get("filters"), typed.get("meta", META_COLUMNS))
