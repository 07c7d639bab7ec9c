"""The base of every settings section: unknown keys are refused, values never change after loading.
With the types settings share: a TCP port, a host, the port of a `host:port` entry, and the address
a browser reaches a service at; and REPO_ROOT, the checkout the defaults place files in."""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, model_validator

REPO_ROOT = Path(__file__).resolve().parent.parent  # the repository's checkout: default places of its files


def _is_number(kind: Any) -> bool:
    """Whether a field of this annotation holds a number, and never true or false."""
    kinds = set(get_args(kind)) if get_origin(kind) in (Union, UnionType) else {kind}
    kinds = {get_args(k)[0] if get_origin(k) is Annotated else k for k in kinds}
    return bool(kinds & {int, float}) and bool not in kinds


def no_truth_for_numbers(model: type[BaseModel], data: Any) -> Any:
    """JSON and TOML have true and false, which pydantic takes for 1 and 0: `ingest_bucket_s =
    true` made one-second buckets. A number setting, or a map of numbers, refuses them."""
    if isinstance(data, dict):
        for name, value in data.items():
            field = model.model_fields.get(name) if isinstance(name, str) else None
            if field is None:
                continue
            kind = field.annotation
            if isinstance(value, bool) and _is_number(kind):
                raise ValueError(f"{name}: {str(value).lower()} is no number")
            if isinstance(value, dict) and get_origin(kind) is dict and _is_number(get_args(kind)[1]):
                if any(isinstance(v, bool) for v in value.values()):
                    raise ValueError(f"{name}: true or false is no number")
    return data


class Section(BaseModel):
    """Errors name the setting and never repeat the value (it may be a secret, and every process
    that loads the settings prints them into its log); NaN and infinity are no setting's value,
    nor true or false a number's."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_truth_for_numbers(cls, data: Any) -> Any:
        return no_truth_for_numbers(cls, data)


Port = Annotated[int, Field(ge=1, le=65_535)]
# A host name or an IP address: nothing that could end a line of the configuration files it is
# written into, nor a URL it is put in.
HOST_PATTERN = r"^[A-Za-z0-9._:%\[\]-]{1,253}$"
ANY_ADDRESS = ("0.0.0.0", "::")


def _joinable(host: str) -> str:
    """The platform writes a host into `host:port` addresses (Kafka's listeners and bootstrap list,
    hdfs://, http://, spark://) as it is: an IPv6 address there reads as another host and port."""
    if any(c in host for c in ":[]%"):
        raise ValueError(
            "an IPv6 address (or a bracket or zone) is not taken here (it is written into host:port addresses): "
            "give a host name that resolves to it"
        )
    return host


def _listening_or_joinable(host: str) -> str:
    if host == "[::]":  # uvicorn and Airflow hand it to bind(), which takes no brackets: a restart loop
        raise ValueError("give every address as :: (or 0.0.0.0), without brackets: the server binds it as it is")
    return host if host in ANY_ADDRESS else _joinable(host)


def bare_address(host: str) -> str:
    """A contact point as a client resolves it: an IPv6 address without its brackets."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def _alone(host: str) -> str:
    """A contact point is an address on its own: a host name, an IPv4 address or an IPv6 one (bare,
    with a zone, or in brackets), never with a port (the driver resolved `host:9042` as a name)."""
    if ":" in host or "[" in host or "]" in host:
        try:
            ipaddress.IPv6Address(bare_address(host))
        except ValueError:
            raise ValueError(
                "is not a host name, IPv4 or IPv6 address (a port is cassandra.port, the same for every contact point)"
            ) from None
    return host


def _reachable(host: str) -> str:
    """A client connects to it and a store the platform runs advertises it: the wildcard address is
    neither (Kafka and Cassandra refuse to start with it, seen only as a health timeout)."""
    try:
        unspecified = ipaddress.ip_address(bare_address(host).split("%")[0]).is_unspecified
    except ValueError:
        unspecified = False
    if unspecified:
        raise ValueError(
            f"{host} (every address) is where a server listens, not an address a client reaches: give the host's "
            "name or address"
        )
    return host


# Where a process is reached (and listens): a host name or an IPv4 address.
Host = Annotated[str, Field(pattern=HOST_PATTERN), AfterValidator(_joinable)]
# ... where a store the platform may run advertises itself (Kafka's listeners): never the wildcard.
StoreHost = Annotated[str, Field(pattern=HOST_PATTERN), AfterValidator(_joinable), AfterValidator(_reachable)]
# Where a server listens and is reached: also every address (:: for IPv6 too), reached on this
# machine's loopback (browser_url).
ListenHost = Annotated[str, Field(pattern=HOST_PATTERN), AfterValidator(_listening_or_joinable)]
# An address handed to a client on its own, never joined to a port (Cassandra's contact points):
# IPv6 bare or in brackets too.
ContactHost = Annotated[str, Field(pattern=HOST_PATTERN), AfterValidator(_alone), AfterValidator(_reachable)]


def printable(text: str) -> str:
    """No line break or other control character: each value written into another program's
    configuration ends there (a JAAS login line: the rest of a password set another option)."""
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ValueError("must not contain a line break or another control character")
    return text


def _printable_secret(secret: SecretStr) -> SecretStr:
    printable(secret.get_secret_value())
    return secret


def _absolute_or_empty(path: Any) -> Any:
    text = printable(str(path))
    if text and not os.path.isabs(text):
        raise ValueError(
            f"must be an absolute path, not {text[:200]!r}: a relative one is looked up from the folder each "
            "process runs in"
        )
    return path


# A user name, and a password: written into clients' configurations as they are.
Credential = Annotated[str, AfterValidator(printable)]
SecretCredential = Annotated[SecretStr, AfterValidator(_printable_secret)]
# A file or folder on this machine (or, for a client's files, where each client runs); empty: none.
AbsolutePath = Annotated[str, AfterValidator(_absolute_or_empty)]
AbsoluteDir = Annotated[Path, AfterValidator(_absolute_or_empty)]


def host_port_problem(entry: str) -> str | None:
    """What keeps `entry` from being a `host:port` the platform can split (None: nothing)."""
    host, _, port = entry.rpartition(":")
    if not host or not is_port(port):
        return "is not host:port"
    if not re.fullmatch(HOST_PATTERN, host) or ":" in host:
        return "is not host:port (a host name or IPv4 address, no scheme, no IPv6 address)"
    return None


def _no_dot_segments(path: str) -> str:
    if path != "/" and any(part in ("", ".", "..") for part in path.split("/")[1:]):
        raise ValueError(
            "must not have `.`, `..` or empty segments (`//`, a trailing `/`): HDFS resolves them, past the "
            "checks that keep paths apart"
        )
    return path


# An absolute HDFS path (relative ones were appended to hdfs://host:port without a slash), with no
# space or colon (Hadoop's Path takes a colon for a scheme) and nothing HDFS would resolve.
HdfsPath = Annotated[str, Field(pattern=r"^/[^\s:]*$"), AfterValidator(_no_dot_segments)]


def is_port(text: str) -> bool:
    """Whether `text` is a TCP port written in ASCII digits ("²" is a digit to str.isdigit)."""
    return text.isascii() and text.isdigit() and 0 < int(text) < 65_536


# Where a browser reaches a service (links in the Airflow UI, answers of the API): an http(s) URL
# without query or fragment; empty: its host and port.
PublicUrl = Annotated[str, Field(pattern=r"^(https?://[A-Za-z0-9._:%\[\]-]{1,253}(/[A-Za-z0-9._~/-]*)?)?$")]


def browser_url(host: str, port: int, public_url: str) -> str:
    """`public_url` (its trailing / dropped), else http://host:port; a service listening on every
    address (0.0.0.0) is reached on this machine's loopback."""
    if public_url:
        return public_url.rstrip("/")
    return f"http://{'127.0.0.1' if host in ANY_ADDRESS else host}:{port}"
