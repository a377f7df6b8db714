"""A Kafka wire-protocol front end on every broker, so that Kafka's own clients and tools read and write ADS.

It owns only what is Kafka's: framing and the version table (``frames``, ``api``), the message codec
(kio, through ``entities``), record batches v2 <-> Arrow (``record_batches``, compiled), SASL on the
Kafka port (``sasl``), sockets (``server``), and the mapping of each API's fields and errors to ADS's own
requests (``handlers_*``). Everything else is ADS's: every Kafka request becomes ADS's action or data-plane
call (``bridge``), so there is one validation path, one authorization path and one replication path
whichever protocol a record came in by. docs/DESIGN.md, "Kafka protocol listener", has the contract.
"""
