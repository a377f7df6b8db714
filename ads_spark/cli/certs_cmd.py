"""``ads certs``: a small CA for trying TLS listeners and client certificates (issue #23).

``create-ca`` writes ca.pem and ca-key.pem (0600) into --dir; ``issue`` signs a certificate with that CA
and writes <name>.pem (the PEM keystore for ssl.keystore.location: key, certificate, CA; 0600) and
<name>.crt. Both print the paths written and never key material. The first --san is the identity a
broker sees for a client certificate, so for a user give its name first (``--san alice``).

``ads_spark.security.certs`` (and with it ``cryptography``) is imported when a command runs: the broker
starts from this parser and needs neither to parse its own arguments.
"""

from __future__ import annotations

from pathlib import Path

from ads_spark.errors import InvalidRequestError

MAX_PASSWORD_FILE_BYTES = 4096


def register(commands) -> None:
    certs = commands.add_parser("certs", help="make a CA and TLS certificates (PEM) for listeners and clients")
    actions = certs.add_subparsers(dest="certs_command", required=True, metavar="ACTION")

    create_ca = actions.add_parser("create-ca", help="write a self-signed CA (ca.pem, ca-key.pem) into --dir")
    create_ca.add_argument("--dir", required=True, help="directory for ca.pem and ca-key.pem (made 0700)")
    create_ca.add_argument("--common-name", default="ADS CA")
    create_ca.add_argument("--days", type=int, default=3650, help="validity in days (default 3650)")
    create_ca.set_defaults(func=create_ca_command)

    issue = actions.add_parser("issue", help="sign a certificate: <name>.pem (key+chain, 0600) and <name>.crt")
    issue.add_argument("--ca-dir", required=True, help="directory of `ads certs create-ca`")
    issue.add_argument("--name", required=True, help="file name stem (letters, digits, '.', '_', '-')")
    issue.add_argument("--san", action="append", default=None,
                       help="subject alternative name, repeatable, order kept; an IP literal becomes an IP "
                            "entry. The first is a client's identity. Default: localhost, 127.0.0.1")
    usage = issue.add_mutually_exclusive_group()
    usage.add_argument("--client-only", action="store_true", help="only clientAuth (a user's certificate)")
    usage.add_argument("--server-only", action="store_true", help="only serverAuth (a listener's certificate)")
    issue.add_argument("--days", type=int, default=825, help="validity in days (default 825)")
    issue.add_argument("--key-password-file", default=None,
                       help="encrypt the key with the password on this file's first line (for ssl.key.password)")
    issue.add_argument("--dir", required=True, help="output directory (made 0700)")
    issue.set_defaults(func=issue_command)


def _read_password(path: str | None) -> str | None:
    if path is None:
        return None
    file = Path(path)
    if file.stat().st_size > MAX_PASSWORD_FILE_BYTES:
        raise InvalidRequestError(f"--key-password-file {path} is larger than {MAX_PASSWORD_FILE_BYTES} bytes")
    lines = file.read_text().splitlines()
    if not lines or not lines[0]:
        raise InvalidRequestError(f"--key-password-file {path} has an empty first line")
    return lines[0]


def create_ca_command(args) -> int:
    from ads_spark.security import certs

    ca = certs.create_ca(args.dir, common_name=args.common_name, valid_days=args.days)
    print(f"CA certificate: {ca.cert_path}")
    print(f"CA private key: {ca.key_path} (mode 0600; keep it secret)")
    return 0


def issue_command(args) -> int:
    from ads_spark.security import certs

    ca = certs.load_ca(args.ca_dir)
    sans = tuple(args.san) if args.san else ("localhost", "127.0.0.1")
    issued = certs.issue_certificate(ca, args.dir, args.name, sans, client=not args.server_only,
                                     server=not args.client_only, valid_days=args.days,
                                     key_password=_read_password(args.key_password_file))
    print(f"keystore (key + certificate chain, for ssl.keystore.location): {issued.keystore_path}")
    print(f"certificate: {issued.cert_path}")
    print(f"subject alternative names: {', '.join(sans)}")
    return 0
