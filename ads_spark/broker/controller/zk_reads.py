"""What the controller reads from ZooKeeper, as the events the controller core takes.

Owns every ZooKeeper read of the controller shell and the value each becomes
(``replication/controller_events.py``'s docstring is the contract): the
``Snapshot`` a term (or a reload) starts from, the event each watch stands for,
and ``TopicsRead``, the answer to the core's ``ReadTopics`` request.

Also the one place a topic's config overrides become the settings the core
decides with (``topic_settings``): laid over the broker's topic defaults by
``ads_spark.config.effective_topic_config``, the function the broker's own
replicas use, so a value is parsed in one place (the core parses none).

Reads that delete what they read (ISR and config change notifications) must be
made only for an active core, so a standby leaves them for the controller: the
caller checks ``state.active`` first.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping

from ads_spark.config import effective_topic_config
from ads_spark.errors import InvalidConfigError
from ads_spark.replication.controller_events import (
    BrokersChanged, IsrChanged, ReassignmentRequested, Snapshot, TopicConfigsChanged, TopicDeletionsRequested,
    TopicsChanged, TopicsRead,
)
from ads_spark.replication.controller_state import (
    BrokerRegistration, ControllerState, Key, TopicInfo, TopicSettings, live_from_dicts,
)
from ads_spark.replication.state import LeaderAndIsr

log = logging.getLogger("ads.controller")


def topic_settings(topic_defaults: Mapping[str, Any], overrides: Mapping[str, Any], topic: str = "") -> TopicSettings:
    """What ``overrides`` (a topic's, as ZooKeeper holds them) come to over the broker's ``topic_defaults``.

    Overrides are validated when written, so an invalid one means ZooKeeper was written around the
    brokers: it is left out with a warning rather than failing every controller that reads it (each
    would resign and the next fail the same way). An override without a value is no override."""
    given = {name: value for name, value in overrides.items() if value is not None}
    try:
        effective = effective_topic_config(topic_defaults, given)
    except InvalidConfigError as exc:
        valid = {name: value for name, value in given.items() if _valid(topic_defaults, name, value)}
        log.warning("controller: topic %s has invalid config overrides in ZooKeeper (%s); deciding without %s",
                    topic, exc, sorted(set(given) - set(valid)))
        effective = effective_topic_config(topic_defaults, valid)
    return TopicSettings(effective["min.insync.replicas"], effective["unclean.leader.election.enable"])


def _valid(topic_defaults: Mapping[str, Any], name: str, value: Any) -> bool:
    try:
        effective_topic_config(topic_defaults, {name: value})
    except InvalidConfigError:
        return False
    return True


class ZkReads:
    """The controller's ZooKeeper reads over one ``ZkClient``; ``topic_defaults`` from the broker config."""

    def __init__(self, zk, topic_defaults: Mapping[str, Any]):
        self.zk = zk
        self.topic_defaults = dict(topic_defaults)

    # ---- a term's start, a reload ---------------------------------------------------

    def snapshot(self) -> Snapshot:
        """Everything, as ``Snapshot`` says: brokers, topics in ``topic_names()`` order, their state
        znodes, the unclean starts applied, the reassignment request."""
        live = live_from_dicts(self.zk.live_brokers())
        topics = {name: self._topic(name) for name in self.zk.topic_names()}
        return Snapshot(live, topics, self._states(topics), self._unclean_applied(live), self.zk.reassignment())

    def topics_read(self, names: Iterable[str]) -> TopicsRead:
        """The answer to ``ReadTopics``: each topic (None if it vanished) and its partitions' states."""
        topics = {name: self._topic(name) for name in names}
        return TopicsRead(topics, self._states(topics))

    # ---- one per watch (only while the core is active) ------------------------------

    def brokers_changed(self, state: ControllerState) -> BrokersChanged:
        live = live_from_dicts(self.zk.live_brokers())
        return BrokersChanged(live, self._unclean_applied(live))

    def topics_changed(self, state: ControllerState) -> TopicsChanged:
        return TopicsChanged(tuple(self.zk.topic_names()))

    def partitions_added(self, state: ControllerState) -> TopicsChanged:
        """Takes (deletes) the partition change notifications: the topics named are read again."""
        grown = tuple(self.zk.take_partition_change_notifications())
        return TopicsChanged(tuple(self.zk.topic_names()), grown)

    def isr_changed(self, state: ControllerState) -> IsrChanged:
        """Takes (deletes) the ISR change notifications; reads the states of the partitions known."""
        keys = tuple(self.zk.take_isr_change_notifications())
        found = self.zk.read_partition_states([key for key in keys if key in state.views])
        return IsrChanged(keys, {key: v.state.to_leader_and_isr(v.zk_version) for key, v in found.items()})

    def topic_deletions(self, state: ControllerState) -> TopicDeletionsRequested:
        return TopicDeletionsRequested(tuple(self.zk.pending_topic_deletions()))

    def topic_configs(self, state: ControllerState) -> TopicConfigsChanged:
        """Takes (deletes) the config change notifications; reads the overrides of the topics known."""
        configs: dict[str, Mapping[str, Any]] = {}
        for name in self.zk.take_config_change_notifications():
            if name in state.topics and name not in configs:
                configs[name] = self.zk.read_topic_config(name)
        return TopicConfigsChanged(configs, {name: topic_settings(self.topic_defaults, config, name)
                                             for name, config in configs.items()})

    def reassignment_requested(self, state: ControllerState) -> ReassignmentRequested:
        return ReassignmentRequested(self.zk.reassignment())

    # ---- helpers -----------------------------------------------------------------------

    def _topic(self, name: str) -> TopicInfo | None:
        found = self.zk.read_topic(name)
        if found is None:
            return None  # deleted between the listing and the read
        return TopicInfo.from_dict(found, topic_settings(self.topic_defaults, found.get("config") or {}, name))

    def _states(self, topics: Mapping[str, TopicInfo | None]) -> dict[Key, LeaderAndIsr]:
        """The state znodes of every partition of ``topics``, at their versions (none: left out)."""
        keys = [(name, number) for name, topic in topics.items() if topic is not None for number in topic.assignment]
        found = self.zk.read_partition_states(keys)
        return {key: found[key].state.to_leader_and_isr(found[key].zk_version) for key in keys if key in found}

    def _unclean_applied(self, live: Mapping[int, BrokerRegistration]) -> dict[int, str | None]:
        """For each live broker registered after an unclean shutdown, the incarnation last applied."""
        return {b: self.zk.unclean_applied(b) for b, registration in live.items() if not registration.clean_shutdown}
