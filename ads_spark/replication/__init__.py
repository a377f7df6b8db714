"""The replication core: pure decisions, no I/O of any kind.

Map of the package (each module says what it owns):

* ``state``     frozen values: PartitionState (one replica on one broker),
                FollowerProgress, LeaderAndIsr (the partition znode),
                PendingIsrChange, PendingProduce, BatchInfo, PartitionConfig;
                ``check_invariants``.
* ``partition`` THE dispatcher ``step(state, event) -> (state, effects)`` with
                every Event and Effect type; ``initial_state``,
                ``fetch_request`` (follower), ``check_consumer_fetch``.
                Start here when integrating the broker.
* ``roles``     leader/follower/none transitions, written once (graph in its docstring).
* ``hw``        the high watermark rule (min LEO over the maximal ISR, never
                back, frozen below min.insync.replicas: KIP-966).
* ``isr``       follower progress, shrink/expand decisions, ELR maintenance,
                ISR proposals.
* ``acks``      acks x min.insync.replicas and the produce purgatory.
* ``epochs``    leader-epoch cache, OffsetsForLeaderEpoch, divergence and
                truncation target (KIP-101/279/320).
* ``dedupe``    idempotent producer table: check, record, truncate, rebuild.
* ``election``  the controller's choices: leader election (ISR, ELR, unclean),
                batched broker-failure handling, preferred leader, controlled
                shutdown.
* ``fencing``   whether a broker obeys a controller request: controller epoch
                and broker epoch (KIP-380).
* ``assignment`` replica placement (owned by another engineer).
* ``group_values`` / ``group_membership`` / ``group_rebalance``: a consumer group's
                membership (Kafka's classic protocol: join, sync, heartbeat, leave,
                generations, static members) as ``(group, effects)`` steps.
* ``group_offsets`` committed offsets: checks, expiry (KIP-211), deletes.
* ``group_records`` the ``__consumer_offsets`` record format (Kafka's bytes),
                ``replay`` (what a new coordinator loads) and ``partition_for``.

Nothing here imports sockets, threads, time, random, files, kazoo or Flight
(tests/unit/test_replication_purity.py enforces it): time and randomness are
inputs, so the same code runs in the broker and in tests/sim.
"""
