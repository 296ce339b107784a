"""Source passwords, kept out of the state table, its history and every log: MySQL keeps them in a table only
its administrator reads (mysql.slave_master_info) and never shows them; rpl_sql keeps them in one file of the
warehouse that only its owner can read, `<warehouse>/_credentials/passwords.json` (mode 0600, folder 0700).

The environment overrides the file, for deployments that hand secrets to processes:
`RPL_SQL_SOURCE_PASSWORD_<CHANNEL>` (the channel name upper-cased, every other character than A-Z and 0-9
as `_`; the default channel's is `RPL_SQL_SOURCE_PASSWORD_`), then the stored password, then
`RPL_SQL_SOURCE_PASSWORD` for every channel.
"""
from __future__ import annotations

import json
import os
import re
import stat
import tempfile

FOLDER = "_credentials"
FILE = "passwords.json"
ENV = "RPL_SQL_SOURCE_PASSWORD"


def env_name(channel: str) -> str:
    """The variable that holds `channel`'s source password.

    >>> env_name("shop-eu")
    'RPL_SQL_SOURCE_PASSWORD_SHOP_EU'
    """
    return f"{ENV}_" + re.sub(r"[^A-Z0-9]", "_", channel.upper())


def _path(warehouse: str) -> str:
    return os.path.join(os.fspath(warehouse), FOLDER, FILE)


def _read(warehouse: str) -> dict[str, str]:
    try:
        with open(_path(warehouse), encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def password(warehouse: str, channel: str) -> str:
    """The password the receiver logs in with: the channel's variable, the stored one, the common variable."""
    if env_name(channel) in os.environ:
        return os.environ[env_name(channel)]
    stored = _read(warehouse).get(channel)
    return stored if stored is not None else os.environ.get(ENV, "")


def has_password(warehouse: str, channel: str) -> bool:
    return env_name(channel) in os.environ or channel in _read(warehouse) or ENV in os.environ


def save(warehouse: str, changes: dict[str, str | None]) -> None:
    """Store (or, for None or '', forget) each channel's password; the file is replaced whole, never readable by
    another user at any moment."""
    if not changes:
        return
    if "://" in os.fspath(warehouse):  # Session refuses SOURCE_PASSWORD there, before anything is committed
        raise ValueError(f"{warehouse}: a warehouse on object storage keeps no password file")
    folder = os.path.join(os.fspath(warehouse), FOLDER)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(folder, stat.S_IRWXU)
    stored = _read(warehouse)
    for channel, pw in changes.items():
        if pw:
            stored[channel] = pw
        else:
            stored.pop(channel, None)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".passwords-")  # created 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(stored, f)
        os.replace(tmp, _path(warehouse))
    except BaseException:
        os.unlink(tmp)
        raise
