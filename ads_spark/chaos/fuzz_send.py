"""How the fuzzer sends one input to one broker, and what it makes of the answer.

Every call has a deadline (``FlightCallOptions(timeout=...)``): a call that passes it is a hang,
never a wait. Only 127.0.0.1 is ever contacted (the raw-body proxy too). Answers are classified
by ``fuzz_report`` (typed, untyped, success, hang, unreachable); nothing here judges them.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa
import pyarrow.flight as flight

from ads_spark.chaos.fuzz_inputs import CONTROLLER_EPOCH, CONTROLLER_ID, LED_PARTITION, SELF_ID, FuzzInput
from ads_spark.chaos.fuzz_raw import BodyScramblingProxy
from ads_spark.chaos.fuzz_report import Answer, code_name, from_json_answers, typed_detail
from ads_spark.protocol.records import PRODUCE_SCHEMA, RECORD_SCHEMA

ANSWER_BYTES_READ_MAX = 1 << 30  # a fetch answer past this is not read further (its size is the finding)
ANSWER_TEXTS_KEPT = 200  # metadata messages of one answer kept for the scan; an answer may have thousands


@dataclass
class Targets:
    """What the placeholders of an input stand for, per receiving broker."""

    controller_id: int = -1
    controller_epoch: int = -1
    led: dict[str, dict[int, int]] = field(default_factory=dict)  # topic -> broker -> a partition it leads

    def fill(self, raw: bytes, broker_id: int, led_topic: str | None) -> bytes:
        replacements = ((CONTROLLER_ID, self.controller_id), (CONTROLLER_EPOCH, self.controller_epoch),
                        (SELF_ID, broker_id))
        if led_topic is not None:
            replacements += ((LED_PARTITION, self.led.get(led_topic, {}).get(broker_id, 0)),)
        for placeholder, value in replacements:
            token = str(placeholder).encode()
            if token in raw:
                raw = raw.replace(token, str(value).encode())
        return raw


def options(timeout_s: float) -> flight.FlightCallOptions:
    return flight.FlightCallOptions(timeout=timeout_s)


# pyarrow appends the client's own context to a Flight error's text ("Client context: IOError: ..."); only
# what comes before it is the broker's.
CLIENT_CONTEXT_MARKERS = (". gRPC client debug context:", " gRPC client debug context:", ". Client context:")


def broker_text(exc: BaseException) -> str:
    """The part of a Flight error's text that the broker sent (its message and the status detail)."""
    text = str(exc)
    cut = min((text.find(marker) for marker in CLIENT_CONTEXT_MARKERS if marker in text), default=len(text))
    return text[:cut]


def failure(exc: BaseException, alive: Callable[[], bool]) -> Answer:
    """What a call that raised got back."""
    extra = getattr(exc, "extra_info", None)
    texts = (broker_text(exc),) + ((bytes(extra).decode("utf-8", "replace"),) if extra else ())
    if isinstance(exc, flight.FlightTimedOutError):
        return Answer("hang", texts=texts)
    detail = typed_detail(extra)
    if detail is not None:
        return Answer("typed", code_name(detail["error_code"]), texts)
    if not alive():
        return Answer("unreachable", texts=texts)
    return Answer("untyped", texts=texts)


def send(client: flight.FlightClient, inp: FuzzInput, broker_id: int, port: int, targets: Targets,
         timeout_s: float, alive: Callable[[], bool]) -> Answer:
    """Send ``inp`` to the broker behind ``client`` (``port``: for the raw proxy) and classify the answer."""
    timeout_s = inp.timeout_s or timeout_s
    raw = targets.fill(inp.build(), broker_id, inp.led_topic) if inp.build is not None else b""
    try:
        if inp.call == "action":
            return send_action(client, inp.name, raw, timeout_s)
        if inp.call == "get":
            return send_get(client, raw, timeout_s)
        if inp.call in ("put", "exchange"):
            return send_descriptor(client, inp, timeout_s)
        if inp.call == "session":  # on the input's own command if it has one (a typed read's, fuzz_typed.py)
            command = targets.fill(inp.descriptor[1](), broker_id, inp.led_topic) if inp.descriptor else None
            return send_session(client, raw, timeout_s, command)
        if inp.call == "produce":
            return send_produce(client, inp, raw, timeout_s)
        if inp.call == "raw_produce":
            mode, seed = inp.scramble.split(":")
            with BodyScramblingProxy(port, mode, int(seed)) as proxy:
                proxied = flight.FlightClient(f"grpc+tcp://127.0.0.1:{proxy.port}")
                try:
                    return send_produce(proxied, inp, raw, timeout_s)
                finally:
                    proxied.close()
        raise ValueError(f"unknown call {inp.call!r}")
    except (flight.FlightError, pa.ArrowException, OSError) as exc:
        return failure(exc, alive)


def send_action(client: flight.FlightClient, name: str, body: bytes, timeout_s: float) -> Answer:
    results = client.do_action(flight.Action(name, pa.py_buffer(body)), options(timeout_s))
    return from_json_answers([r.body.to_pybytes().decode("utf-8", "replace") for r in results])


def read_stream(reader, deadline_s: float) -> tuple[list[str], int, int]:
    """(metadata texts, rows, buffer bytes) of every chunk until the end, bounded in bytes kept and read."""
    texts, rows, size = [], 0, 0
    while size < ANSWER_BYTES_READ_MAX:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            break
        if chunk.app_metadata is not None and len(texts) < ANSWER_TEXTS_KEPT:
            texts.append(chunk.app_metadata.to_pybytes().decode("utf-8", "replace"))
        if chunk.data is not None:
            rows += chunk.data.num_rows
            size += chunk.data.get_total_buffer_size()
        if time.monotonic() > deadline_s:
            raise flight.FlightTimedOutError("the answer outlasted the call's deadline")
    return texts, rows, size


def send_get(client: flight.FlightClient, ticket: bytes, timeout_s: float) -> Answer:
    started = time.monotonic()
    reader = client.do_get(flight.Ticket(ticket), options(timeout_s))
    texts, rows, size = read_stream(reader, started + timeout_s)
    return from_json_answers(texts, {"rows": rows, "bytes": size, "elapsed_s": round(time.monotonic() - started, 2)})


def _descriptor(inp: FuzzInput) -> flight.FlightDescriptor:
    kind, value = inp.descriptor
    if kind == "path":
        return flight.FlightDescriptor.for_path(*value)
    return flight.FlightDescriptor.for_command(value())


@contextmanager
def _closed_on_error(writer):
    """Close ``writer`` if the stream fails: left to its destructor, Arrow logs "Close() failed" on stderr."""
    try:
        yield writer
    except BaseException:
        try:
            writer.close()
        except (flight.FlightError, pa.ArrowException, OSError):
            pass
        raise


def send_descriptor(client: flight.FlightClient, inp: FuzzInput, timeout_s: float) -> Answer:
    """Open a DoPut or DoExchange with the input's descriptor, write nothing, read what comes back."""
    descriptor = _descriptor(inp)
    started = time.monotonic()
    if inp.call == "put":
        writer, metadata_reader = client.do_put(descriptor, PRODUCE_SCHEMA, options(timeout_s))
        with _closed_on_error(writer):
            writer.done_writing()
            texts = []
            while len(texts) < ANSWER_TEXTS_KEPT:
                answer = metadata_reader.read()
                if answer is None:
                    break
                texts.append(answer.to_pybytes().decode("utf-8", "replace"))
            writer.close()
        return from_json_answers(texts)
    writer, reader = client.do_exchange(descriptor, options(timeout_s))
    with _closed_on_error(writer):
        writer.begin(PRODUCE_SCHEMA)
        writer.done_writing()
        texts, _, _ = read_stream(reader, started + timeout_s)
        writer.close()
    return from_json_answers(texts)


def send_session(client: flight.FlightClient, request: bytes, timeout_s: float,
                 command: bytes | None = None) -> Answer:
    """One fetch-session request on a new session (opened with ``command``, by default a plain fetch session),
    answered until its "end" message."""
    started = time.monotonic()
    writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(command or b'{"type": "fetch_session"}'),
                                        options(timeout_s))
    texts, rows = [], 0
    with _closed_on_error(writer):
        writer.begin(RECORD_SCHEMA)
        writer.write_metadata(pa.py_buffer(request))
        while time.monotonic() < started + timeout_s:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                break
            rows += chunk.data.num_rows if chunk.data is not None else 0
            text = chunk.app_metadata.to_pybytes().decode("utf-8", "replace") if chunk.app_metadata is not None else ""
            if text and len(texts) < ANSWER_TEXTS_KEPT:
                texts.append(text)
            if _ends_answer(text):
                break
        writer.done_writing()
        read_stream(reader, started + timeout_s)
        writer.close()
    return from_json_answers(texts, {"rows": rows})


def _ends_answer(text: str) -> bool:
    if '"end"' not in text:
        return False
    try:
        return json.loads(text).get("end") is True
    except (ValueError, AttributeError):
        return False


def send_produce(client: flight.FlightClient, inp: FuzzInput, metadata: bytes, timeout_s: float) -> Answer:
    """A produce stream of one chunk: the input's batch (or none) with ``metadata``; every answer read."""
    started = time.monotonic()
    batch = inp.batch() if inp.batch is not None else None
    writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(b'{"type": "produce"}'), options(timeout_s))
    with _closed_on_error(writer):
        writer.begin(inp.schema or (batch.schema if batch is not None else PRODUCE_SCHEMA))
        if batch is None:
            writer.write_metadata(pa.py_buffer(metadata))
        else:
            writer.write_with_metadata(batch, pa.py_buffer(metadata))
        writer.done_writing()
        texts, _, _ = read_stream(reader, started + timeout_s)
        writer.close()
    if not texts:
        return Answer("untyped", texts=("the produce stream ended without an answer",))
    return from_json_answers(texts)
