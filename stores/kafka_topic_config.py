"""The platform's Kafka topics as they must be: `events` and the dead-letter topic created with every
setting (LogAppendTime, retention, stored compression, deletion by retention only), existing ones
brought to them, and what the streaming jobs check of `events` before they start."""

from __future__ import annotations

import logging
import time

from definitions.settings import Settings
from stores.clients import kafka_admin
from stores.kafka import TIMESTAMP_TYPE

log = logging.getLogger(__name__)


def topic_configs(settings: Settings) -> dict[str, dict[str, str]]:
    configs = {
        _TYPE_KEY: TIMESTAMP_TYPE,
        "retention.ms": str(settings.kafka.retention_hours * 3600 * 1000),
        _COMPRESSION_KEY: settings.kafka.stored_compression,
        _POLICY_KEY: POLICY,
    }
    return {settings.kafka.events_topic: configs, settings.kafka.dlq_topic: dict(configs)}


def ensure_topics(settings: Settings) -> list[str]:
    """Create missing topics (with every setting: timestamp type, retention, stored compression,
    deletion by retention only), and bring existing ones to the timestamp type, the stored
    compression and the clean-up policy; the topics created."""
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

    admin = kafka_admin(settings, client_id="lambdactl-bootstrap")
    try:
        existing = set(admin.list_topics())
        wanted = topic_configs(settings)
        new = [
            NewTopic(
                name,
                num_partitions=settings.kafka.partitions,
                replication_factor=settings.kafka.replication_factor,
                topic_configs=configs,
            )
            for name, configs in wanted.items()
            if name not in existing
        ]
        if new:
            admin.create_topics(new, validate_only=False)
            log.info("created topics %s", ", ".join(t.name for t in new))
        for name in sorted(wanted.keys() & existing):
            resource = ConfigResource(ConfigResourceType.TOPIC, name)
            described = admin.describe_configs([resource])
            # Brought to the settings: the timestamp type (the time model needs the brokers' clock),
            # the stored compression (a consumer's memory: records bounded as stored) and deletion by
            # retention only (compaction deletes records no job has read). A topic's own retention is
            # the operator's: the setting fills it only where the topic has none.
            enforced = (_TYPE_KEY, _COMPRESSION_KEY, _POLICY_KEY)
            current = {k: _topic_config(described, k) for k in enforced}
            differ = {k: v for k, v in current.items() if v != wanted[name][k]}
            if not differ:
                continue
            log.warning(
                "topic %s has %s; setting %s",
                name,
                ", ".join(f"{k}={v}" for k, v in differ.items()),
                ", ".join(f"{k}={wanted[name][k]}" for k in differ),
            )
            # AlterConfigs replaces the topic's whole configuration: its other overrides go along.
            overrides = _topic_overrides(described)
            configs = {
                "retention.ms": wanted[name]["retention.ms"],
                **overrides,
                **{k: wanted[name][k] for k in enforced},
            }
            answer = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, configs=configs)])
            responses = answer if isinstance(answer, list) else [answer]
            refused = [f"{r[1] or 'error ' + str(r[0])}" for response in responses for r in response.resources if r[0]]
            for key in differ:
                want = wanted[name][key]
                after = _applied(admin, resource, key, want, wait_s=0 if refused else 15)
                if after == want:
                    continue
                problem = (
                    f"topic {name} keeps {key}={after}"
                    + (f" (Kafka refused the change: {'; '.join(refused)})" if refused else "")
                    + f": set it to {want} (kafka-configs.sh --alter --entity-type topics "
                    f"--entity-name {name} --add-config {key}={want})"
                )
                if key in (_TYPE_KEY, _POLICY_KEY):  # no exact answer without them
                    raise RuntimeError(problem)
                log.warning("%s", problem)  # the jobs refuse to start (check_timestamp_type), naming it
        return [t.name for t in new]
    finally:
        admin.close()


def check_timestamp_type(settings: Settings) -> None:
    """Raise RuntimeError, saying how to fix it, unless topic `events` stamps records with the
    brokers' clock (LogAppendTime): with CreateTime a producer chooses each record's ingest time,
    and one far-future stamp moves the archiver's completeness (and a batch's cutoff) past every
    event still to come. The streaming jobs ask before they start (`lambdactl up` sets the type on
    the stack it manages; a cluster's topics are set by their operator)."""
    from kafka.admin import ConfigResource, ConfigResourceType

    topic = settings.kafka.events_topic
    admin = kafka_admin(settings, client_id="lambda-topic-check")
    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        admin.close()
    errors = [(r[0], r[1] or f"error {r[0]}") for response in described for r in response.resources if r[0]]
    if errors and all(code in NOT_AUTHORIZED for code, _ in errors):  # a cluster's ACLs: not judged unread
        log.warning("cannot read topic %s's timestamp type (%s): not checked", topic, "; ".join(m for _, m in errors))
        return
    if errors:  # no such topic (a consumer may create it, with the brokers' default type), or worse
        raise RuntimeError(
            f"topic {topic}'s configuration cannot be read ({'; '.join(m for _, m in errors)}): create it with "
            f"message.timestamp.type={TIMESTAMP_TYPE} (`lambdactl bootstrap`, or kafka-topics.sh)"
        )
    found = _topic_config(described, _TYPE_KEY)
    if found != TIMESTAMP_TYPE:
        raise RuntimeError(
            f"topic {topic} has message.timestamp.type={found}, not {TIMESTAMP_TYPE}: records would carry the "
            f"ingest time their producer chose. Set it (kafka-configs.sh --alter --entity-type topics --entity-name "
            f"{topic} --add-config message.timestamp.type={TIMESTAMP_TYPE}, or `lambdactl up` on the stack it manages)"
        )
    policy = _topic_config(described, _POLICY_KEY) or POLICY
    if "compact" in policy:
        raise RuntimeError(
            f"topic {topic} has {_POLICY_KEY}={policy}: compaction deletes every record but the last of "
            f"each key, read or not (the ticks share one key). Set it (kafka-configs.sh --alter --entity-type "
            f"topics --entity-name {topic} --add-config {_POLICY_KEY}={POLICY}, or `lambdactl up` on the stack "
            "it manages)"
        )
    stored = _topic_config(described, _COMPRESSION_KEY)
    chosen = settings.kafka.stored_compression
    if stored is None:  # Kafka names every setting, defaults too: a broker that did not is not judged
        log.warning("topic %s's %s was not given: not checked", topic, _COMPRESSION_KEY)
    elif stored != chosen:
        raise RuntimeError(
            f"topic {topic} has {_COMPRESSION_KEY}={stored}, the settings say {chosen}: kept as producers "
            "compressed them, a small batch can declare a record that decompresses to more than this job's "
            "memory, which kills it at every restart. Set it (kafka-configs.sh --alter --entity-type topics "
            f"--entity-name {topic} --add-config {_COMPRESSION_KEY}=uncompressed, or `lambdactl up` on the stack "
            f"it manages), or, taking that risk, set kafka.stored_compression={stored}"
        )
    if chosen != "uncompressed":
        log.warning(
            "topic %s keeps batches as producers compressed them (kafka.stored_compression=%s): one small batch "
            "can declare a record larger than this job's memory, an OutOfMemoryError at every restart",
            topic,
            chosen,
        )


_TYPE_KEY = "message.timestamp.type"
_COMPRESSION_KEY = "compression.type"
_POLICY_KEY = "cleanup.policy"
# Compaction keeps the last record of each key only: the ticks share one key, so do a user's events.
POLICY = "delete"
NOT_AUTHORIZED = (29, 31)  # Kafka's TOPIC_ and CLUSTER_AUTHORIZATION_FAILED


def _applied(admin, resource, key: str, want: str, wait_s: float) -> str | None:
    """The topic's `key` once the change has reached the broker asked (a change reaches the other
    brokers of a cluster a moment later): read again for up to `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        found = _topic_config(admin.describe_configs([resource]), key)
        if found == want or time.monotonic() >= deadline:
            return found
        time.sleep(0.5)


# DescribeConfigs' config_source of a value set on the topic itself (DYNAMIC_TOPIC_CONFIG).
_TOPIC_SOURCE = 1


def _topic_overrides(described) -> dict[str, str]:
    """The values set on the topic itself (not inherited from the broker), as DescribeConfigs gives
    them: (name, value, read_only, config_source, is_sensitive, synonyms)."""
    return {
        entry[0]: entry[1]
        for response in described
        for resource in response.resources
        for entry in resource[4]
        if len(entry) > 3 and entry[3] == _TOPIC_SOURCE and entry[1] is not None and not entry[2]
    }


def _topic_config(described, key: str) -> str | None:
    for response in described:
        for resource in response.resources:
            # (error_code, error_message, resource_type, resource_name, config_entries)
            for entry in resource[4]:
                if entry[0] == key:
                    return entry[1]
    return None


class NoPartitions(RuntimeError):
    """Kafka described no partition of the topic (none such, or an error it answered with)."""


def partition_count(settings: Settings, topic: str) -> int:
    """How many partitions `topic` has; NoPartitions when Kafka describes none: counted as 0, a
    topic-level error made the completeness marker expect no partition, so that any one partition's
    progress passed for the whole topic's."""
    admin = kafka_admin(settings)
    try:
        described = admin.describe_topics([topic])[0]
    finally:
        admin.close()
    count = len(described.get("partitions") or ())
    if described.get("error_code") or count == 0:
        raise NoPartitions(f"Kafka describes no partition of topic {topic} (error code {described.get('error_code')})")
    return count
