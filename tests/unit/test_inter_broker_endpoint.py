"""A broker dials a peer on the endpoint named by its OWN inter.broker.listener.name (Kafka's rule).

While ``inter.broker.listener.name`` is switched in a rolling restart, the peers' registrations name
different inter-broker listeners at their top level; dialing that top-level address with one's own
protocol speaks TLS to a PLAINTEXT port (docs/security-upgrade.md, step 2).
"""

from ads_spark.replication.controller_state import BrokerRegistration, endpoint_address

ENDPOINTS = {"PLAINTEXT": {"host": "10.0.0.1", "port": 9092, "protocol": "PLAINTEXT"},
             "SSL": {"host": "10.0.0.1", "port": 9093, "protocol": "SSL"}}


def test_the_endpoint_of_the_dialers_listener_is_chosen_not_the_top_level_one():
    registration = BrokerRegistration.from_dict({"host": "10.0.0.1", "port": 9092, "endpoints": ENDPOINTS})
    assert registration.address_on("SSL") == ("10.0.0.1", 9093)
    assert registration.address_on("PLAINTEXT") == ("10.0.0.1", 9092)
    assert endpoint_address(ENDPOINTS, "SSL", ("10.0.0.1", 9092)) == ("10.0.0.1", 9093)


def test_a_registration_without_that_listener_or_without_endpoints_gives_its_top_level_address():
    assert endpoint_address({"PLAINTEXT": ENDPOINTS["PLAINTEXT"]}, "SSL", ("10.0.0.1", 9092)) == ("10.0.0.1", 9092)
    assert endpoint_address(None, "SSL", ("h", 1)) == ("h", 1)
    assert BrokerRegistration.from_dict({"host": "h", "port": 1}).address_on("SSL") == ("h", 1)
