"""``ads users add|delete|list``: the users SASL/PLAIN listeners authenticate.

A password is never an argument (argv is visible to every local user in ``ps`` and lands in shell
history): it comes from ``--password-file`` (its first line) or from stdin -- asked twice without echo on
a terminal, or read as one line from a pipe. It is never printed or logged; the broker stores only a salted
hash. Adding an existing user changes its password; that and ``delete`` invalidate the user's tokens.
"""

from __future__ import annotations

import getpass
import json
import sys
from pathlib import Path

from ads_spark.cli.common import add_bootstrap, admin_call
from ads_spark.errors import InvalidRequestError
from ads_spark.security.credentials import MAX_PASSWORD_BYTES, Secret

PASSWORD_FILE_BYTES_MAX = 64 * 1024


def register(commands) -> None:
    users = commands.add_parser("users", help="add (or change the password of), delete or list users")
    actions = users.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="add a user, or change its password")
    add_bootstrap(add)
    add.add_argument("--user", "--name", dest="name", required=True, help="the user name (User:NAME)")
    add.add_argument("--password-file", dest="password_file", default=None,
                     help="a file whose first line is the password (default: read it from stdin)")
    add.set_defaults(func=add_user)
    delete = actions.add_parser("delete")
    add_bootstrap(delete)
    delete.add_argument("--user", "--name", dest="name", required=True)
    delete.set_defaults(func=delete_user)
    listing = actions.add_parser("list")
    add_bootstrap(listing)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=list_users)


def _first_line(text: str) -> str:
    return text.split("\n", 1)[0].rstrip("\r")


def read_password(password_file: str | None, stdin=None) -> Secret:
    """The new password from ``password_file``'s first line, or stdin (no echo on a terminal)."""
    stdin = stdin or sys.stdin
    if password_file is not None:
        path = Path(password_file)
        try:
            with path.open("rb") as handle:
                raw = handle.read(PASSWORD_FILE_BYTES_MAX)
        except OSError as exc:
            raise InvalidRequestError(f"cannot read --password-file {path}: {exc.strerror}") from None
        try:
            password = _first_line(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise InvalidRequestError(f"--password-file {path} is not UTF-8 text") from None
    elif stdin.isatty():
        password = getpass.getpass("Password: ")
        if getpass.getpass("Password again: ") != password:
            raise InvalidRequestError("the two passwords differ; nothing changed")
    else:
        password = _first_line(stdin.readline(MAX_PASSWORD_BYTES * 4 + 2))
    if not password:
        raise InvalidRequestError("the password is empty; nothing changed")
    return Secret(password)


def add_user(args) -> int:
    password = read_password(args.password_file)
    admin_call(args, lambda admin: admin.upsert_user(args.name, password))
    print(f"user {args.name} saved (its earlier tokens, if any, no longer work)")
    return 0


def delete_user(args) -> int:
    admin_call(args, lambda admin: admin.delete_user(args.name))
    print(f"user {args.name} deleted (its tokens no longer work)")
    return 0


def list_users(args) -> int:
    names = admin_call(args, lambda admin: admin.list_users())
    if args.json:
        print(json.dumps(names))
    else:
        for name in names:
            print(name)
    return 0
