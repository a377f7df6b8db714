"""Broker keys of listeners, TLS, SASL, ACLs and ZooKeeper protection (docs/DESIGN.md, "Security").

Declared here and spliced into ``config.BROKER_KEYS``; the values are checked against each other in
``config.BrokerConfig`` (listener_config.check_security).
"""

from __future__ import annotations

from ads_spark.config_key import ConfigKey, _int
from ads_spark.listener_config import DEFAULT_PROTOCOL_MAP, NONLOOPBACK_KEY
from ads_spark.security.credentials import (
    DEFAULT_ITERATIONS, DEFAULT_TOKEN_LIFETIME_MS, MAX_ITERATIONS, MAX_TOKEN_LIFETIME_MS, MIN_ITERATIONS,
)

# Arrow Flight's only switch (disable_server_verification) skips the CA check with the host name check.
NO_HOSTNAME_SKIP = (("", "Flight cannot skip the host name check without skipping the CA check too; issue "
                          "certificates that name the host (ads certs issue --san HOST)"),)
AUTHORIZER_CLASS_NAMES = ("", "kafka.security.authorizer.AclAuthorizer",
                          "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "ads.security.AclAuthorizer")
SECURITY_BROKER_KEYS = [
    ConfigKey("listener.security.protocol.map", "str", DEFAULT_PROTOCOL_MAP, "NAME:PROTOCOL[,...]: the security "
              "protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) of each listener name"),
    ConfigKey("inter.broker.listener.name", "str", "", "the listener brokers call each other on (controller, "
              "replication); empty: the first of listeners"),
    ConfigKey(NONLOOPBACK_KEY, "bool", False, "allow a PLAINTEXT or SASL_PLAINTEXT listener bound to an address "
              "other hosts can reach (records and passwords then cross the network unencrypted)"),
    ConfigKey("ssl.keystore.type", "enum", "PEM", "format of ssl.keystore.location", choices=("PEM",)),
    ConfigKey("ssl.truststore.type", "enum", "PEM", "format of ssl.truststore.location", choices=("PEM",)),
    ConfigKey("ssl.keystore.location", "str", "", "PEM file with this broker's private key (PKCS#8, may be "
              "encrypted) and certificate chain; needed by SSL and SASL_SSL listeners"),
    ConfigKey("ssl.key.password", "str", "", "password of an encrypted key in ssl.keystore.location"),
    ConfigKey("ssl.truststore.location", "str", "", "PEM CA bundle: client certificates are verified against it, "
              "and this broker's own TLS calls trust it"),
    ConfigKey("ssl.client.auth", "enum", "none", "none, or required: an SSL client must present a certificate "
              "the truststore verifies", choices=("none", "required"),
              refused=(("requested", "Flight cannot request a certificate without requiring it; use required or "
                                     "none"),)),
    ConfigKey("ssl.principal.mapping.rules", "str", "DEFAULT", "Kafka's RULE:pattern/replacement/[LU],...,DEFAULT: "
              "the principal of a client certificate's subject"),
    ConfigKey("ssl.endpoint.identification.algorithm", "enum", "https", "https: this broker's TLS calls check "
              "the server's host name (always: empty is refused)", choices=("https",), refused=NO_HOSTNAME_SKIP),
    ConfigKey("sasl.enabled.mechanisms", "enum", "PLAIN", "SASL mechanism of SASL listeners",
              choices=("PLAIN",)),
    ConfigKey("sasl.jaas.config", "str", "", "PlainLoginModule credentials this broker logs in with when the "
              "inter-broker listener is SASL_PLAINTEXT or SASL_SSL"),
    ConfigKey("authorizer.class.name", "enum", "", "empty: no authorization; any of the ACL authorizer names: "
              "ACLs decide every request", choices=AUTHORIZER_CLASS_NAMES),
    ConfigKey("super.users", "str", "", "User:a;User:b: principals every ACL check allows"),
    ConfigKey("allow.everyone.if.no.acl.found", "bool", False, "a resource with no ACL is open to everyone"),
    _int("authentication.token.lifetime.ms", DEFAULT_TOKEN_LIFETIME_MS, "lifetime of the tokens the authenticate "
         "action issues", 1, MAX_TOKEN_LIFETIME_MS),
    _int("credential.hash.iterations", DEFAULT_ITERATIONS, "PBKDF2 iterations of a new or changed user's "
         "password hash", MIN_ITERATIONS, MAX_ITERATIONS),
    ConfigKey("zookeeper.set.acl", "bool", False, "znodes ADS creates get creator-only ACLs (world-readable "
              "except secrets)"),
    ConfigKey("zookeeper.ssl.client.enable", "bool", False, "talk to ZooKeeper over TLS"),
    ConfigKey("zookeeper.ssl.keystore.location", "str", "", "PEM key and certificate for ZooKeeper's client "
              "authentication"),
    ConfigKey("zookeeper.ssl.truststore.location", "str", "", "PEM CA bundle ZooKeeper's certificate is checked "
              "against"),
    ConfigKey("zookeeper.ssl.endpoint.identification.algorithm", "enum", "https", "https: check ZooKeeper's "
              "certificate host name; empty: do not", choices=("https", "")),
]
