"""The consumer-group methods of ``Consumer``, as confluent-kafka's Consumer has them.

A mixin, so that ``client/consumer.py`` (positions and reads) stays about reading, and everything about
groups lives under ``client/groups/``. The consumer calls ``_group_before_poll`` at the start of each
poll and ``_group_close`` from ``close``; the rest is the user's API:

* ``subscribe(topics or "^regex", on_assign=, on_revoke=, on_lost=)``: callbacks get
  ``(consumer, [TopicPartition])`` on the consumer's thread, inside ``poll``;
* ``unsubscribe()``; ``assignment()`` (the consumer's own);
* ``commit(offsets=None, message=None, asynchronous=False)``: the current positions, a message's
  offset + 1, or the given ``TopicPartition``s (with ``metadata`` and ``leader_epoch``); synchronous:
  the committed list, a failure raised as its typed error; asynchronous: a ``concurrent.futures.Future``
  of that list (confluent-kafka returns None and reports to ``on_commit``; ADS has no callable config
  values, so the future carries the outcome);
* ``committed(partitions, timeout=None)``: the group's committed offsets (``OFFSET_INVALID`` when none),
  with metadata and leader epoch.

Without ``group.id``, ``subscribe``/``commit``/``committed`` raise INVALID_GROUP_ID. With ``group.id`` and
``assign()`` (no subscription), commits are standalone (generation -1, no member id), as Kafka's.
"""

from __future__ import annotations

from concurrent.futures import Future

from ads_spark.client.chunks import TopicPartition
from ads_spark.client.groups.membership import GroupMember
from ads_spark.client.groups.settings import group_settings
from ads_spark.errors import InvalidGroupIdError, InvalidRequestError


class GroupMethods:
    _group: GroupMember | None

    def _make_group(self, config) -> None:
        settings = group_settings(config)
        self._group = GroupMember(self, settings) if settings is not None else None

    def _member(self, what: str) -> GroupMember:
        if self._group is None:
            raise InvalidGroupIdError(f"{what} needs a consumer group: set 'group.id'")
        return self._group

    def _subscribed(self) -> bool:
        return self._group is not None and self._group.subscribed()

    def subscribe(self, topics, on_assign=None, on_revoke=None, on_lost=None) -> None:
        member = self._member("subscribe")
        if self._positions and not member.subscribed():
            raise InvalidRequestError("subscribe after assign: a consumer uses one or the other (unassign first)")
        member.subscribe(topics, on_assign, on_revoke, on_lost)

    def unsubscribe(self) -> None:
        if self._subscribed():
            self._group.unsubscribe()

    def commit(self, offsets: list[TopicPartition] | None = None, message=None,
               asynchronous: bool = False) -> list[TopicPartition] | Future:
        member = self._member("commit")
        if message is not None and offsets is not None:
            raise InvalidRequestError("commit takes offsets or a message, not both")
        if message is not None:
            key = (message.topic, message.partition)
            chosen = {key: (message.offset + 1, self._position_epochs.get(key, -1), "")}
        elif offsets is not None:
            chosen = {}
            for tp in offsets:
                if tp.offset < 0:
                    raise InvalidRequestError(f"commit of {tp.topic}-{tp.partition}: offset {tp.offset} is not an "
                                              "offset")
                epoch = -1 if tp.leader_epoch is None else tp.leader_epoch
                chosen[(tp.topic, tp.partition)] = (tp.offset, epoch, tp.metadata or "")
        else:
            chosen = member._positions_to_commit()
        if asynchronous:
            return member.commit_async(chosen)
        return member.commit_offsets(chosen) if chosen else []

    def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        return self._member("committed").committed(partitions, timeout)

    def _group_before_poll(self, timeout_s: float) -> None:
        if self._group is not None:
            self._group.before_poll(timeout_s)

    def _group_close(self) -> None:
        if self._group is not None:
            self._group.close()
