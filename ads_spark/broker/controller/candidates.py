"""What the controller checks of the candidates before it elects: who restarted, and whose log holds most.

A mixin of ``Controller`` (it uses its ``states``, ``topics``, ``live``, ``epoch``
and ``_connections``).

* Restarted ISR members (``election.restarted_members``, judged against the broker
  epochs of the live registrations): every decision takes its view without them
  (``_decision_view``), except the pass over broker changes, which writes them out
  of the ISR (``Controller._broker_change_decisions``), and ``_write_out_restarted_members``
  after ISR changes, which does the same for a member a leader's late write named.
* Unclean recovery (KIP-966): before an unclean election the controller asks the
  partition's live replicas where their logs end, so the most complete one leads.
  Without it an unclean election took the first live replica in assignment
  order, which could be an empty one while another live replica held records
  acknowledged under an earlier ISR: more loss than the election has to cause.
  Decisions stay pure (``election.choose_leader`` takes the answers); this
  module only asks. Unclean elections are opt-in and rare, so the questions go
  in turn on the controller's thread, each bounded by ``LOG_END_QUERY_TIMEOUT_MS``;
  a replica that does not answer is left out, and with no answer at all the
  choice falls back to assignment order.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from ads_spark.protocol import wire
from ads_spark.errors import AdsError
from ads_spark.replication import election
from ads_spark.replication.election import Decision, LogEnd, PartitionView

log = logging.getLogger("ads.controller")

LOG_END_QUERY_TIMEOUT_MS = 3_000  # per broker asked; a hung broker costs the controller at most this

# Per partition, per replica that answered: (last epoch, log end offset).
LogEnds = dict[tuple[str, int], dict[int, LogEnd]]


class CandidateChecks:
    def _decision_view(self, view: PartitionView) -> PartitionView:
        """What a decision may take ``view`` as: without ISR members restarted since the ISR was written."""
        return election.without_restarted_members(view, self._live_broker_epochs())

    def _decision_views(self, views) -> list[PartitionView]:
        live_broker_epochs = self._live_broker_epochs()
        return [election.without_restarted_members(view, live_broker_epochs) for view in views]

    def _write_out_restarted_members(self, keys) -> None:
        """After ISR changes: the ISR of ``keys`` without members restarted since the leader's write named them.

        A leader's write adding a member can land after that member restarted, and so after the pass over
        broker changes that took the restarted broker out (simulation seed 1034869). The read-time check
        already keeps such a member from being elected; this writes it out of the znode too, as the
        simulation's controller does on every round, so metadata and the ELR stop counting it."""
        epochs = self._live_broker_epochs()
        views = [self.states[key] for key in sorted(keys)
                 if key in self.states and election.restarted_members(self.states[key], epochs)]
        if views:  # the pass over broker changes, with none failed, over these partitions only
            self._apply_decisions(self._broker_change_decisions(frozenset(), {}, views))

    def _live_broker_epochs(self) -> dict[int, int]:
        return {b: int(info["broker_epoch"]) for b, info in self.live.items() if "broker_epoch" in info}

    def _with_unclean_recovery(self, decide: Callable[[LogEnds | None], list[Decision]]) -> list[Decision]:
        """``decide`` once; if that elects uncleanly anywhere, ask those partitions' live replicas where
        their logs end and ``decide`` again with the answers."""
        decisions = decide(None)
        unclean = {(d.topic, d.partition) for d in decisions if d.unclean}
        if not unclean:
            return decisions
        return decide(self._replica_log_ends(unclean))

    def _replica_log_ends(self, keys: set[tuple[str, int]]) -> LogEnds:
        if not keys:
            return {}
        asked: dict[int, list[dict[str, Any]]] = {}
        for key in sorted(keys):
            view = self.states[key]
            topic = self.topics.get(key[0], {})
            for replica in view.replicas:
                if replica in self.live and replica not in view.observers:
                    asked.setdefault(replica, []).append({
                        "topic": key[0], "partition": key[1], "topic_id": topic.get("topic_id", ""),
                        "config": topic.get("config", {})})
        found: LogEnds = {}
        for broker_id, partitions in sorted(asked.items()):
            for item in self._ask_log_ends(broker_id, partitions):
                if item.get("error_code", 0) == 0 and "log_end_offset" in item:
                    found.setdefault((item["topic"], int(item["partition"])), {})[broker_id] = (
                        int(item["last_epoch"]), int(item["log_end_offset"]))
        log.info("controller: replica log ends before an unclean election: %s", found)
        return found

    def _ask_log_ends(self, broker_id: int, partitions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        info = self.live.get(broker_id)
        if info is None or self._connections is None:
            return []
        body = {"controller_epoch": self.epoch, "partitions": partitions}
        try:
            response = self._connections.call_action(info["host"], int(info["port"]), wire.ACTION_REPLICA_LOG_ENDS,
                                                     body, LOG_END_QUERY_TIMEOUT_MS)
        except AdsError as exc:
            log.warning("controller: broker %s did not report its log ends (%s); it is left out", broker_id, exc)
            return []
        return list(response.get("partitions") or [])
