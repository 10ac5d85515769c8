"""What ``serve`` refuses to start with (issue 16): secure by default, local use unchanged.

* **Anonymous reads off loopback.** With no authentication configured, every request is the
  principal ``User:ANONYMOUS``; that is the local default (``make run``, scripts, tools) and
  stays so on a loopback address. On any other address the gateway would hand every topic to
  whoever reaches the port, so it does not start unless ``allow_anonymous`` says that is meant.
* **Private key files others may read** (the RSA key pairs of encrypted segments, the TLS
  key): refused, as ssh refuses such an identity file, unless ``allow_readable_keys``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gateway.config import Settings
from gateway.errors import ConfigurationError

ANONYMOUS = "User:ANONYMOUS"


def check_start(settings: Settings) -> None:
    """Raise :class:`ConfigurationError` for a start the rules above refuse."""
    if not settings.authentication and not settings.loopback and not settings.allow_anonymous:
        raise ConfigurationError(
            f"listening on {settings.host}, not a loopback address, with no authentication: "
            "anyone who reaches the port could read every topic. Configure authentication "
            "(jwt_issuer, tls_client_ca or api_keys_file, with an acl_file), or say that "
            "anonymous reads are meant with --allow-anonymous (TIERED_GATEWAY_ALLOW_ANONYMOUS)"
        )
    if not settings.allow_readable_keys:
        for path in private_key_files(settings):
            check_private_file(path)


def private_key_files(settings: Settings) -> list[Path]:
    """The configured files that hold private keys."""
    from gateway.remote.keyring import parse_spec  # noqa: PLC0415 - settings checked it

    files = [parse_spec(spec)[1] for spec in settings.key_pairs]
    if settings.tls_keyfile is not None:
        files.append(settings.tls_keyfile)
    return files


def check_private_file(path: Path) -> None:
    """Refuse a private key file that others may read or write, or that a group may write, or
    read unless it is this process's own group (as ssh does, but for that one case: Kubernetes
    mounts a Secret ``0440`` owned by the pod's ``fsGroup``, a group of the pod's user alone)."""
    try:
        st = path.stat()
    except OSError:
        return  # missing or unreadable: the loader names that problem itself
    mode = st.st_mode
    loose = stat.S_IMODE(mode) & 0o077
    if loose == 0o040 and st.st_gid == os.getegid():
        loose = 0  # readable by our own group only
    if loose:
        raise ConfigurationError(
            f"private key file {path} is accessible to group or others (mode "
            f"{stat.S_IMODE(mode):04o}): run chmod 600 {path}, or allow it with "
            "--allow-readable-keys (TIERED_GATEWAY_ALLOW_READABLE_KEYS)"
        )
