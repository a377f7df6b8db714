"""The controller's side of partition reassignment: carrying out ``replication.reassignment``.

A mixin of ``Controller`` (it uses its ``zk``, ``states``, ``live``, ``epoch`` and
push helpers). ``/admin/reassign_partitions`` (Kafka's JSON, written by the admin
handler) starts moves; ISR change notifications and broker changes re-check them;
a move ends once every target replica is in sync, and the request znode is
removed when no move is left. A new controller resumes moves from ZooKeeper.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from ads_spark.protocol import wire
from ads_spark.errors import ErrorCode
from ads_spark.replication import reassignment

log = logging.getLogger("ads.controller")


class ReassignmentRuntime:
    def _on_reassignment(self) -> None:
        """Start every partition move named in /admin/reassign_partitions (Kafka's JSON)."""
        if not self.active:
            return
        request = self.zk.reassignment()
        if request is None:
            return
        throttle = request.get("throttle_bytes_per_s")
        started = []
        for item in request.get("partitions", []):
            key, target = (str(item["topic"]), int(item["partition"])), tuple(int(r) for r in item["replicas"])
            view = self.states.get(key)
            if view is None or key in self.reassignments:
                continue
            if reassignment.validate(target, self.live) is not ErrorCode.NONE:
                log.warning("controller: reassignment of %s-%s to %s refused (brokers not all alive)", *key, target)
                continue
            plan = reassignment.begin(view.replicas, target)
            self._write_assignment(key, plan.replicas, plan.adding, plan.removing)
            self.states[key] = replace(view, replicas=plan.replicas)
            self.reassignments[key] = target
            if throttle:
                self.throttles[key] = int(throttle)
            started.append(reassignment.announce(self.states[key], self.epoch))
            log.info("controller: reassigning %s-%s from %s to %s", key[0], key[1], list(view.replicas), list(target))
        # A state write (new partition epoch) makes the leader take the larger replica set.
        self._apply_decisions(started)
        self._maybe_complete_reassignments(request_seen=True)

    def _maybe_complete_reassignments(self, request_seen: bool = False) -> None:
        """Finish each move whose new replicas are all in sync; clear the request when none is left."""
        if not self.reassignments and not request_seen:
            return
        live = frozenset(self.live)
        for key, target in list(self.reassignments.items()):
            view = self.states.get(key)
            decision = None if view is None else reassignment.complete(self._decision_view(view), target, live,
                                                                       self.epoch)
            if decision is None:
                continue
            removed = [r for r in view.replicas if r not in target]
            self._apply_decisions([decision])
            self._write_assignment(key, target, (), ())
            self.states[key] = replace(self.states[key], replicas=target)
            del self.reassignments[key]
            self.throttles.pop(key, None)
            for broker_id in removed:
                self._call(broker_id, wire.ACTION_STOP_REPLICA, {"controller_epoch": self.epoch, "partitions": [
                    {"topic": key[0], "partition": key[1], "delete": True}]})
            self._send_leader_and_isr({key})
            log.info("controller: reassignment of %s-%s to %s completed", key[0], key[1], list(target))
        if not self.reassignments:
            self.zk.clear_reassignment()  # every move named in it is done (or was refused)
        self._push_metadata_everywhere()

    def _write_assignment(self, key: tuple[str, int], replicas, adding, removing) -> None:
        number = key[1]

        def change(znode):
            def put(mapping, value):
                out = dict(mapping)
                if value:
                    out[number] = tuple(value)
                else:
                    out.pop(number, None)
                return out

            return replace(znode, partitions={**znode.partitions, number: tuple(replicas)},
                           adding_replicas=put(znode.adding_replicas, adding),
                           removing_replicas=put(znode.removing_replicas, removing))

        self.zk.write_topic_assignment(key[0], change, self.epoch_version)

