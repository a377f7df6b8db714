"""The transport ceiling of `benchmarks.compare`: a minimal replicated Flight relay, no ADS code.

    python -m benchmarks.relay check     # start leader + 2 followers, push 20,000 x 1 KiB, print records/s, stop

With ``--followers 0`` the leader acknowledges once a batch is in its file: the
unreplicated reference, so the machine's own RF=3 / RF=1 ratio for this work
is measured next to ADS's (``ceiling-rf1`` in ``benchmarks.compare``).

A leader process accepts Arrow batches on one Flight ``do_put`` stream and
appends each to an Arrow IPC file; two follower processes long-poll it with
``do_get`` (ticket: the index they want next, which also tells the leader they
hold everything before it) and append what they get to their own IPC files.
The leader acknowledges batch i on the put stream once both followers have
asked for an index past i. Reading and acknowledging run on separate threads,
so a client with many batches in flight is never held up by one round trip.
There is no offsets index, CRC, ISR, idempotence or metadata: whatever ADS
spends beyond this is its own overhead, on the same machine, in the same run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight

from benchmarks.peers.procs import free_port, spawn, stop_all, wait_for_port

FOLLOWERS = 2
LONG_POLL_MS = 500
FETCH_BATCHES_MAX = 64
PUT_WINDOW_BATCHES = 64
ACK_TIMEOUT_S = 120.0
SCHEMA = pa.schema([pa.field("value", pa.binary())])


class RelayLeader(flight.FlightServerBase):
    def __init__(self, location: str, data_dir: Path, followers: int = FOLLOWERS):
        super().__init__(location)
        self.sink = pa.OSFile(str(data_dir / "leader.arrow"), "wb")
        self.writer = pa.ipc.new_file(self.sink, SCHEMA)
        self.cond = threading.Condition()
        self.batches: dict[int, pa.RecordBatch] = {}  # index -> batch, kept until both followers have it
        self.end_index_exclusive = 0
        self.follower_next = [0] * followers  # the index each follower asks for next

    def replicated_end(self) -> int:
        return min(self.follower_next) if self.follower_next else self.end_index_exclusive

    def do_put(self, context, descriptor, reader, writer):
        first_index = None
        acker = None
        put = {"end_exclusive": None}  # set once the client has sent its last batch
        while True:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                break
            with self.cond:
                self.writer.write_batch(chunk.data)
                index = self.end_index_exclusive
                if self.follower_next:
                    self.batches[index] = chunk.data
                self.end_index_exclusive += 1
                self.cond.notify_all()
            if first_index is None:
                first_index = index
                acker = threading.Thread(target=self._ack, args=(writer, first_index, put), daemon=True)
                acker.start()
        if acker is not None:
            with self.cond:
                put["end_exclusive"] = self.end_index_exclusive
                self.cond.notify_all()
            acker.join(ACK_TIMEOUT_S)

    def _ack(self, writer, first_index: int, put: dict) -> None:
        """Sends, in order, one ack per batch of this put once both followers have fetched past it."""
        acked = first_index
        deadline = time.monotonic() + ACK_TIMEOUT_S
        while time.monotonic() < deadline:
            with self.cond:
                self.cond.wait_for(lambda: self.replicated_end() > acked or put["end_exclusive"] == acked,
                                   timeout=1.0)
                replicated = self.replicated_end()
                if put["end_exclusive"] is not None and acked >= put["end_exclusive"]:
                    return
            for index in range(acked, replicated):
                writer.write(pa.py_buffer(index.to_bytes(8, "little")))
            acked = max(acked, replicated)

    def do_get(self, context, ticket):
        request = json.loads(ticket.ticket)
        follower, start = request["follower"], request["from"]
        with self.cond:
            self.follower_next[follower] = max(self.follower_next[follower], start)
            for index in [i for i in self.batches if i < self.replicated_end()]:
                del self.batches[index]
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.end_index_exclusive > start, timeout=LONG_POLL_MS / 1000)
            end = min(self.end_index_exclusive, start + FETCH_BATCHES_MAX)
            batches = [self.batches[i] for i in range(start, end)]
        return flight.RecordBatchStream(pa.Table.from_batches(batches, SCHEMA))


def run_follower(leader_port: int, follower: int, data_dir: Path, run_for_s: float) -> None:
    client = flight.connect(f"grpc://127.0.0.1:{leader_port}")
    with pa.OSFile(str(data_dir / f"follower-{follower}.arrow"), "wb") as sink, \
            pa.ipc.new_file(sink, SCHEMA) as writer:
        next_index, deadline = 0, time.monotonic() + run_for_s
        while time.monotonic() < deadline:
            ticket = flight.Ticket(json.dumps({"follower": follower, "from": next_index}).encode())
            try:
                reader = client.do_get(ticket)
                for chunk in reader:
                    writer.write_batch(chunk.data)
                    next_index += 1
            except flight.FlightUnavailableError:
                time.sleep(0.2)  # the leader is going away or not up yet


class Relay:
    """The three relay processes, started and stopped together."""

    def __init__(self, work_dir: Path | None = None, run_for_s: float = 7200.0, followers: int = FOLLOWERS):
        self.dir = Path(work_dir or tempfile.mkdtemp(prefix="relay-"))
        self._owns_dir = work_dir is None  # its log files are removed with it at down()
        self.followers = followers
        self.run_for_s = run_for_s
        self.port = 0
        self.processes = []

    def up(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        module = [sys.executable, "-m", "benchmarks.relay"]
        self.processes.append(spawn([*module, "leader", "--port", str(self.port), "--dir", str(self.dir),
                                     "--followers", str(self.followers)], self.dir / "leader.log"))
        wait_for_port(self.port, 30, self.processes[0], "relay leader")
        for follower in range(self.followers):
            self.processes.append(spawn([*module, "follower", "--port", str(self.port), "--id", str(follower),
                                         "--dir", str(self.dir), "--for-s", str(self.run_for_s)],
                                        self.dir / f"follower-{follower}.log"))

    def down(self) -> None:
        stop_all(self.processes, self.dir)
        self.processes = []
        if self._owns_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def produce_batched(self, records: int, batch_records: int = 512, record_bytes: int = 1024) -> float:
        """One put stream, at most PUT_WINDOW_BATCHES unacknowledged; records/s once all are acknowledged."""
        batch = pa.record_batch({"value": pa.array([b"c" * record_bytes] * batch_records, pa.binary())})
        batches = records // batch_records
        client = flight.connect(f"grpc://127.0.0.1:{self.port}")
        started = time.perf_counter()
        writer, ack_reader = client.do_put(flight.FlightDescriptor.for_path("log"), SCHEMA)
        acked = 0
        for sent in range(1, batches + 1):
            writer.write_batch(batch)
            while sent - acked >= PUT_WINDOW_BATCHES:
                ack_reader.read()
                acked += 1
        writer.done_writing()
        while acked < batches:
            if ack_reader.read() is None:
                raise RuntimeError(f"relay acknowledged {acked} of {batches} batches")
            acked += 1
        elapsed = time.perf_counter() - started
        writer.close()
        client.close()
        return batches * batch_records / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description="minimal replicated Flight relay (the transport ceiling)")
    parser.add_argument("role", choices=["leader", "follower", "check"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--id", type=int, default=0)
    parser.add_argument("--followers", type=int, default=FOLLOWERS, help="0: acknowledge once written (RF=1)")
    parser.add_argument("--dir", default=None)
    parser.add_argument("--for-s", type=float, default=7200.0, help="a follower's bounded lifetime")
    args = parser.parse_args()
    if args.role == "leader":
        server = RelayLeader(f"grpc://127.0.0.1:{args.port}", Path(args.dir), args.followers)
        server.serve()
    elif args.role == "follower":
        run_follower(args.port, args.id, Path(args.dir), args.for_s)
    else:
        relay = Relay(followers=args.followers)
        relay.up()
        try:
            print(f"relay ({args.followers} followers): {relay.produce_batched(20_480):,.0f} records/s")
        finally:
            relay.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
