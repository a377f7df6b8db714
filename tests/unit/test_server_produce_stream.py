"""An answer that comes after its produce stream's handler returned is dropped; it does not crash the broker.

acks=all answers come from other threads once followers have fetched. A stream that ends (the client is
done, cancelled it or died: the read ends alike) waits for its pending answers, but only for the drain
(request.timeout.ms.max and a margin); an answer after that found the call's writer freed, and writing to
a freed Flight writer is a segfault. The child process shortens the drain to 0.1 s and a stand-in broker
answers each batch 300 ms after it arrives; the Flight server is the real one. In a child, so that a crash fails this test
instead of killing the test run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD_TIMEOUT_S = 60
STREAMS = 10
BATCHES_PER_STREAM = 20  # in flight when the stream is cancelled, as a pipelining producer has them

CHILD = textwrap.dedent(f"""
    import threading, time
    import pyarrow as pa, pyarrow.flight as flight
    from ads_spark.broker.rpc import server as server_module
    from ads_spark.broker.rpc.server import BrokerFlightServer
    server_module.PRODUCE_DRAIN_MARGIN_S = 0.1
    from ads_spark.protocol import wire
    from ads_spark.protocol.records import PRODUCE_SCHEMA

    class LateBroker:
        config = {{"request.timeout.ms.max": 0}}  # with the margin above: a 0.1 s drain

        def __init__(self):
            self.answered = 0
            self.lock = threading.Lock()

        def handle_produce_chunk(self, data, app_metadata, respond):
            def answer():
                respond({{"correlation_id": 1, "error_code": 0, "base_offset": 0}})
                with self.lock:
                    self.answered += 1
            threading.Timer(0.3, answer).start()

    broker = LateBroker()
    server = BrokerFlightServer(broker, "127.0.0.1", 0)
    threading.Thread(target=server.serve, daemon=True).start()
    batch = pa.RecordBatch.from_pylist([{{"value": b"x"}}], schema=PRODUCE_SCHEMA)
    descriptor = flight.FlightDescriptor.for_command(wire.dumps({{"type": wire.PRODUCE}}))
    for _ in range({STREAMS}):
        client = flight.FlightClient(f"grpc://127.0.0.1:{{server.port}}")
        writer, reader = client.do_exchange(descriptor)
        writer.begin(PRODUCE_SCHEMA)
        for _ in range({BATCHES_PER_STREAM}):
            writer.write_with_metadata(batch, pa.py_buffer(wire.dumps({{"correlation_id": 1}})))
        writer.done_writing()  # the handler drains for 0.1 s and returns; the answers come 0.3 s after
        time.sleep(0.15)
        reader.cancel()
        try:
            writer.close()
        except flight.FlightError:
            pass
        client.close()
    deadline = time.monotonic() + 10
    while broker.answered < {STREAMS * BATCHES_PER_STREAM} and time.monotonic() < deadline:
        time.sleep(0.05)
    print("answered", broker.answered, flush=True)
    server.shutdown()
""")


def test_answers_after_the_handler_returned_are_dropped_without_a_crash():
    child = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    assert child.returncode == 0, f"exit {child.returncode}; stderr: {child.stderr[-2000:]}"
    assert f"answered {STREAMS * BATCHES_PER_STREAM}" in child.stdout, child.stdout
