"""Password hashes, stored credentials, tokens and client security settings (ads_spark.security)."""

from __future__ import annotations

import ast
import copy
import json
import pathlib
import pickle

import pytest

from ads_spark.errors import AdsError, InvalidConfigError
from ads_spark.security import client_security, credentials
from ads_spark.security.client_security import (ClientSecurity, SecurityConfigError, parse_client_security,
                                                parse_jaas_config)
from ads_spark.security.credentials import (MIN_ITERATIONS, CredentialFormatError, MalformedTokenError, Secret,
                                            StoredCredential, TokenExpiredError, TokenRevokedError,
                                            TokenSignatureError, hash_password, issue_token,
                                            next_credential_version, validate_username, verify_password,
                                            verify_token)

SALT = bytes(range(16))
SECRET_A = b"a" * 32
SECRET_B = b"b" * 32
NOW_MS = 1_700_000_000_000
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def _credential(password="s3cret", version=1, salt=SALT):
    return StoredCredential.create(password, salt, version, iterations=MIN_ITERATIONS)


# --- hashing and stored credentials ------------------------------------------------------------------

def test_hash_is_salted_deterministic_and_sha512_sized():
    first = hash_password("pw", SALT, MIN_ITERATIONS)
    assert first == hash_password(Secret("pw"), SALT, MIN_ITERATIONS)
    assert len(first) == 64
    assert first != hash_password("pw", bytes(16), MIN_ITERATIONS)
    assert first != hash_password("pw", SALT, MIN_ITERATIONS + 1)


def test_verify_accepts_the_password_and_refuses_others_and_unknown_users():
    stored = _credential("s3cret")
    assert stored.verify("s3cret") and verify_password(stored, Secret("s3cret"))
    assert not verify_password(stored, "s3cret ")
    assert not verify_password(None, "s3cret")  # unknown user: a full hash, then no


def test_an_unknown_user_costs_a_full_hash_at_the_clusters_iterations(monkeypatch):
    calls = []
    real = credentials.hash_password
    monkeypatch.setattr(credentials, "hash_password", lambda *args: calls.append(args[2]) or real(*args))
    assert not verify_password(None, "pw", unknown_user_iterations=MIN_ITERATIONS + 5)
    assert not verify_password(None, "pw")
    assert calls == [MIN_ITERATIONS + 5, credentials.DEFAULT_ITERATIONS]


@pytest.mark.parametrize("kwargs, field", [
    ({"salt": b"short"}, "salt"),
    ({"iterations": MIN_ITERATIONS - 1}, "iterations"),
    ({"iterations": True}, "iterations"),
    ({"password": ""}, "password"),
    ({"password": "x" * 1025}, "password"),
])
def test_hash_inputs_out_of_bounds_name_the_field(kwargs, field):
    args = {"password": "pw", "salt": SALT, "iterations": MIN_ITERATIONS, **kwargs}
    with pytest.raises(CredentialFormatError) as info:
        hash_password(**args)
    assert info.value.field == field and not info.value.retriable


def test_stored_credential_round_trips_through_json_and_hides_its_hash():
    stored = _credential(version=7)
    data = stored.to_json()
    assert StoredCredential.from_json(data) == stored
    assert StoredCredential.from_json(data.decode()).verify("s3cret")
    assert set(json.loads(data)) == {"algorithm", "iterations", "salt", "hash", "credential_version"}
    assert "s3cret" not in data.decode() and json.loads(data)["hash"] not in repr(stored)


def _mutated(**changes) -> bytes:
    fields = json.loads(_credential().to_json())
    fields.update(changes)
    return json.dumps({k: v for k, v in fields.items() if v is not ...}).encode()


@pytest.mark.parametrize("data, field", [
    (b"not json", "credential"),
    (b"[1]", "credential"),
    (b"{" + b" " * 5000 + b"}", "credential"),
    (_mutated(salt="!!"), "salt"),
    (_mutated(salt="AAAA"), "salt"),  # 3 bytes
    (_mutated(hash=12), "hash"),
    (_mutated(hash="AAAA"), "hash"),
    (_mutated(iterations="4096"), "iterations"),
    (_mutated(iterations=10**9), "iterations"),
    (_mutated(credential_version=0), "credential_version"),
    (_mutated(credential_version=...), "credential_version"),
    (_mutated(algorithm="md5"), "algorithm"),
    (_mutated(extra=1), "extra"),
])
def test_malformed_stored_credentials_are_refused_naming_the_field(data, field):
    with pytest.raises(CredentialFormatError) as info:
        StoredCredential.from_json(data)
    assert info.value.field == field
    assert field in str(info.value)


def test_credential_versions_never_come_back():
    assert next_credential_version(None, NOW_MS) == NOW_MS
    assert next_credential_version(NOW_MS, NOW_MS) == NOW_MS + 1  # changed twice in one millisecond
    assert next_credential_version(5, NOW_MS) == NOW_MS


@pytest.mark.parametrize("name", ["*", "a:b", "a;b", "a,b", "a b", "", "x" * 129, "é", "a\nb", 7])
def test_user_names_that_would_confuse_acls_or_lists_are_refused(name):
    with pytest.raises(CredentialFormatError) as info:
        validate_username(name)
    assert info.value.field == "username"


# --- tokens ------------------------------------------------------------------------------------------

def _versions(**users):
    return lambda name: users.get(name)


def test_token_verifies_until_expiry_and_names_the_principal():
    token = issue_token(SECRET_A, "alice", 3, NOW_MS, lifetime_ms=1000)
    claims = verify_token([SECRET_A], token, NOW_MS + 999, _versions(alice=3))
    assert (claims.username, claims.credential_version, claims.expiry_ms) == ("alice", 3, NOW_MS + 1000)
    assert claims.principal == "User:alice"
    with pytest.raises(TokenExpiredError) as info:
        verify_token([SECRET_A], token, NOW_MS + 1000, _versions(alice=3))
    assert not info.value.retriable and isinstance(info.value, AdsError)


def _retyped(token: str, **changes) -> str:
    prefix, payload, mac = token.split(".")
    fields = json.loads(credentials._b64decode(payload))
    fields.update(changes)
    return ".".join([prefix, credentials._b64encode(json.dumps(fields).encode()), mac])


def test_tampered_tokens_fail_the_signature_check():
    token = issue_token(SECRET_A, "alice", 3, NOW_MS)
    versions = _versions(alice=3, admin=3)
    for forged in (_retyped(token, u="admin"), _retyped(token, exp=NOW_MS * 2), _retyped(token, v=4),
                   token[:-2] + ("AA" if not token.endswith("AA") else "BB")):
        with pytest.raises(TokenSignatureError):
            verify_token([SECRET_A], forged, NOW_MS, versions)


def test_a_token_from_a_foreign_secret_is_refused():
    token = issue_token(SECRET_B, "alice", 3, NOW_MS)
    with pytest.raises(TokenSignatureError):
        verify_token([SECRET_A], token, NOW_MS, _versions(alice=3))


@pytest.mark.parametrize("token", ["", "ads1", "ads1.a.b.c", "ads2.e30.AAAA", "ads1.e30=.AAAA", "ads1.!!.AAAA",
                                   "ads1." + "A" * 2000 + ".AAAA", None, b"ads1.e30.AAAA"])
def test_malformed_tokens_are_refused_without_a_traceback_worth_of_detail(token):
    with pytest.raises(MalformedTokenError) as info:
        verify_token([SECRET_A], token, NOW_MS, _versions(alice=1))
    assert "Traceback" not in str(info.value)


def test_deleting_a_user_or_changing_its_password_revokes_its_tokens():
    token = issue_token(SECRET_A, "alice", 3, NOW_MS)
    with pytest.raises(TokenRevokedError, match="deleted"):
        verify_token([SECRET_A], token, NOW_MS, _versions())
    with pytest.raises(TokenRevokedError, match="password changed"):
        verify_token([SECRET_A], token, NOW_MS, _versions(alice=4))


def test_secret_rotation_keeps_old_tokens_until_the_old_secret_is_dropped():
    old = issue_token(SECRET_A, "alice", 1, NOW_MS)
    new = issue_token(SECRET_B, "alice", 1, NOW_MS)
    versions = _versions(alice=1)
    assert verify_token([SECRET_B, SECRET_A], old, NOW_MS, versions).username == "alice"
    assert verify_token([SECRET_B, SECRET_A], new, NOW_MS, versions).username == "alice"
    with pytest.raises(TokenSignatureError):
        verify_token([SECRET_B], old, NOW_MS, versions)


@pytest.mark.parametrize("secrets", [[], [b"short"], [SECRET_A] * 9, ["a" * 32]])
def test_bad_secret_lists_are_refused(secrets):
    token = issue_token(SECRET_A, "alice", 1, NOW_MS)
    with pytest.raises(CredentialFormatError):
        verify_token(secrets, token, NOW_MS, _versions(alice=1))


@pytest.mark.parametrize("kwargs", [{"secret": b"short"}, {"username": "*"}, {"credential_version": 0},
                                    {"lifetime_ms": 0}, {"lifetime_ms": 8 * 24 * 3600 * 1000}])
def test_issue_refuses_bad_inputs(kwargs):
    args = {"secret": SECRET_A, "username": "alice", "credential_version": 1, "now_ms": NOW_MS, **kwargs}
    with pytest.raises(CredentialFormatError):
        issue_token(**args)


def test_a_token_neither_contains_the_secret_nor_is_reused_across_versions():
    first = issue_token(SECRET_A, "alice", 1, NOW_MS)
    assert first != issue_token(SECRET_A, "alice", 2, NOW_MS)
    assert SECRET_A.decode() not in first


# --- secrets -----------------------------------------------------------------------------------------

def test_secret_hides_its_value_and_refuses_pickling():
    secret = Secret("hunter2")
    for shown in (repr(secret), str(secret), f"{secret}", f"{secret!r:>20}", repr({"p": secret})):
        assert "hunter2" not in shown
    assert secret.reveal() == "hunter2" and secret == Secret("hunter2") and secret != Secret("hunter3")
    assert copy.deepcopy(secret) is secret and copy.copy(secret) is secret
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        with pytest.raises(TypeError, match="ship the token"):
            pickle.dumps(secret, protocol)
    with pytest.raises(AttributeError):
        secret.__dict__  # slots: no second place the value could hide


def test_parsed_settings_hide_the_password_and_cannot_be_pickled():
    parsed = parse_client_security({"security.protocol": "SASL_SSL", "sasl.jaas.config":
                                    f'{PLAIN} required username="alice" password="hunter2";'})
    assert "hunter2" not in repr(parsed) and "hunter2" not in str(parsed)
    with pytest.raises(TypeError):
        pickle.dumps(parsed)
    pickle.dumps(ClientSecurity("SSL"))  # no password: fine to ship


# --- JAAS strings ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, username, password, flag", [
    (f'{PLAIN} required username="alice" password="a\\"b";', "alice", 'a"b', "required"),
    (f'{PLAIN} required username="alice" password="a\\\\b";', "alice", "a\\b", "required"),
    (f'  {PLAIN}\n  REQUIRED\n username=alice\tpassword="p w;=" ;  ', "alice", "p w;=", "required"),
    (f'{PLAIN} optional password="x" username="bob";', "bob", "x", "optional"),
    (f'{PLAIN} required username="a" password="\\n\\101\\q";', "a", "\nAq", "required"),
    (f'{PLAIN} required username="a" password="é€";', "a", "é€", "required"),
])
def test_jaas_strings_spark_users_write_are_parsed(text, username, password, flag):
    login = parse_jaas_config(text)
    assert (login.username, login.password.reveal(), login.flag) == (username, password, flag)


def test_a_jaas_string_held_as_a_secret_is_parsed_and_stays_hidden():
    config = {"security.protocol": "SASL_SSL",
              "sasl.jaas.config": Secret(f'{PLAIN} required username="alice" password="hunter2";')}
    parsed = parse_client_security(config)
    assert parsed.password.reveal() == "hunter2" and "hunter2" not in repr(config) + repr(parsed)


@pytest.mark.parametrize("text, problem", [
    (f'{PLAIN} required username="alice" password="hunter2', "unterminated"),
    (f'{PLAIN} required username="alice" password="hunter2\\";', "unterminated"),
    ('org.apache.kafka.common.security.scram.ScramLoginModule required username="a" password="hunter2";',
     "ScramLoginModule is not a supported"),
    ('hunter2 required username="a" password="x";', "the first word is not a supported"),
    (f'{PLAIN} required password="hunter2";', "missing option 'username'"),
    (f'{PLAIN} required username="alice";', "missing option 'password'"),
    (f'{PLAIN} required username="alice" password="hunter2"', "missing ';'"),
    (f'{PLAIN} username="alice" password="hunter2";', "control flag"),
    (f'{PLAIN} maybe username="alice" password="hunter2";', "control flag"),
    (f'{PLAIN} required username="alice" password hunter2;', "expected name=value"),
    (f'{PLAIN} required username="alice" password=hunter2 hunter2;', "expected name=value"),
    (f'{PLAIN} required username="alice" password="hunter2" password="x";', "given twice"),
    (f'{PLAIN} required username="alice" token="hunter2";', "unknown option 'token'"),
    (f'{PLAIN} required username="alice" password="hunter2"; {PLAIN} required;', "more than one"),
    (f'{PLAIN} required username="*" password="hunter2";', "user name"),
    (f'{PLAIN} required username="alice" password="";', "'password' is empty"),
    (f'{PLAIN} required username="alice" password=`hunter2`;', "unexpected character"),
    ("", "is empty"),
    ("x" * 9000, "at most"),
    (None, "must be a string"),
])
def test_malformed_jaas_strings_name_the_key_and_never_echo_the_password(text, problem):
    with pytest.raises(SecurityConfigError) as info:
        parse_jaas_config(text, key="ads.sasl.jaas.config")
    message = str(info.value)
    assert problem in message and "'ads.sasl.jaas.config'" in message
    assert info.value.key == "ads.sasl.jaas.config" and isinstance(info.value, InvalidConfigError)
    assert "hunter2" not in message


# --- client settings ---------------------------------------------------------------------------------

def test_defaults_and_non_sasl_protocols():
    assert parse_client_security({}) == ClientSecurity("PLAINTEXT")
    parsed = parse_client_security({"ads.security.protocol": "ssl", "unrelated": "x"}, prefix="ads.")
    assert parsed == ClientSecurity("SSL") and parsed.uses_tls and not parsed.uses_sasl


def test_sasl_username_and_password_keys():
    parsed = parse_client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "plain",
                                    "sasl.username": "alice", "sasl.password": "hunter2"})
    assert (parsed.protocol, parsed.mechanism, parsed.username) == ("SASL_PLAINTEXT", "PLAIN", "alice")
    assert parsed.password.reveal() == "hunter2" and parsed.uses_sasl and not parsed.uses_tls
    given_secret = parse_client_security({"security.protocol": "SASL_SSL", "sasl.username": "alice",
                                          "sasl.password": Secret("hunter2")})
    assert given_secret.password == Secret("hunter2") and given_secret.mechanism == "PLAIN"


@pytest.mark.parametrize("config, key, problem", [
    ({"ads.security.protocol": "TLS"}, "ads.security.protocol", "must be one of"),
    ({"ads.security.protocol": "SASL_SSL", "ads.sasl.mechanism": "SCRAM-SHA-512",
      "ads.sasl.username": "a", "ads.sasl.password": "hunter2"}, "ads.sasl.mechanism", "PLAIN"),
    ({"ads.security.protocol": "SASL_SSL", "ads.sasl.mechanism": "GSSAPI"}, "ads.sasl.mechanism", "PLAIN"),
    ({"ads.security.protocol": "SASL_SSL", "ads.sasl.username": "a"}, "ads.sasl.password", "missing"),
    ({"ads.security.protocol": "SASL_SSL", "ads.sasl.password": "hunter2"}, "ads.sasl.username", "missing"),
    ({"ads.security.protocol": "SASL_SSL"}, "ads.sasl.username", "missing"),
    ({"ads.security.protocol": "SASL_SSL", "ads.sasl.username": "a;b", "ads.sasl.password": "hunter2"},
     "ads.sasl.username", "user name"),
    ({"ads.security.protocol": "SASL_SSL", "ads.sasl.username": "a", "ads.sasl.password": 5},
     "ads.sasl.password", "must be a string"),
    ({"ads.security.protocol": "SASL_SSL", "ads.sasl.username": "a", "ads.sasl.password": "hunter2",
      "ads.sasl.jaas.config": f'{PLAIN} required username="a" password="hunter2";'}, "ads.sasl.username",
     "not both"),
    ({"ads.security.protocol": "SSL", "ads.sasl.password": "hunter2"}, "ads.sasl.password", "SASL_PLAINTEXT"),
    ({"ads.sasl.jaas.config": f'{PLAIN} required username="a" password="hunter2";'}, "ads.sasl.jaas.config",
     "SASL_PLAINTEXT"),
    ({"ads.security.protocol": "SASL_SSL", "ads.sasl.jaas.config": f'{PLAIN} required username="a" '
      'password="hunter2"'}, "ads.sasl.jaas.config", "missing ';'"),
])
def test_refused_settings_name_the_key_and_not_the_password(config, key, problem):
    with pytest.raises(SecurityConfigError) as info:
        parse_client_security(config, prefix="ads.")
    assert info.value.key == key and problem in str(info.value) and f"'{key}'" in str(info.value)
    assert "hunter2" not in str(info.value) and not info.value.retriable


def test_security_modules_do_no_io():
    forbidden = {"os", "time", "random", "secrets", "socket", "pathlib", "io", "logging", "subprocess",
                 "threading", "datetime", "uuid", "pickle", "importlib", "kazoo", "pyarrow"}
    for module in (credentials, client_security):
        tree = ast.parse(pathlib.Path(module.__file__).read_text())
        names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        names |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        calls = {node.func.id for node in ast.walk(tree)
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
        assert not {name.split(".")[0] for name in names} & forbidden, module.__name__
        assert not calls & {"eval", "exec", "open", "__import__", "compile"}, module.__name__
