"""What the last lines of a dying service's log say, in words for the person running the stack."""

from __future__ import annotations

import re

# What a dying service's log says, and what to tell a person about it.
DIAGNOSES: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(r"Address already in use|BindException|Failed to bind|port is already in use", re.I),
        "a port it needs is already in use",
    ),
    (
        re.compile(r"cannot assign requested address|Cannot assign requested address", re.I),
        "the host it is set to listen on is not an address of this machine",
    ),
    (
        re.compile(r"OutOfMemoryError|Cannot allocate memory|insufficient memory", re.I),
        "out of memory: raise its heap in settings or free memory",
    ),
    (
        re.compile(
            r"ConfigurationException|Invalid yaml|Invalid configuration|ConfigException|IllegalArgumentException: .*conf",
            re.I,
        ),
        "bad configuration",
    ),
    (
        re.compile(r"ClassNotFoundException|NoClassDefFoundError|Could not find or load main class", re.I),
        "missing classes: run `make setup` to resolve the jars",
    ),
    (re.compile(r"UnsupportedClassVersionError|Unsupported major.minor", re.I), "wrong Java version"),
    (
        re.compile(r"InconsistentFSStateException|Incompatible clusterIDs|Invalid cluster.id", re.I),
        "stored data does not match this cluster: remove the service's data dir in the state dir",
    ),
]


def likely_causes(log_tail: str) -> list[str]:
    """The causes the log's last lines point to, most specific first (empty when none is recognised)."""
    return [message for pattern, message in DIAGNOSES if pattern.search(log_tail)]
