"""Whether Kafka still holds every record no batch run absorbed: what a fresh start of the speed
layer (`lambdactl reset-speed`, or a checkpoint removed by hand) needs, as it recomputes every
realtime row from the earliest offset Kafka keeps. A record Kafka's retention deleted above a
view's batch cutoff would then be in no layer."""

from __future__ import annotations

from definitions.settings import Settings
from definitions.times import iso_ms
from definitions.views import Registry

_UNREAD = object()


def unabsorbed_loss(
    settings: Settings, declared: Registry | None = None, pointer=_UNREAD, made_again: bool = False
) -> tuple[int, list[str], list[str]] | None:
    """(the lowest batch cutoff of the maintained views, the partitions whose records from it on Kafka's
    retention deleted, the declared views without a batch run), or None when Kafka holds them all.
    The declared views are loaded and the pointer read unless given (a caller that checked them
    already passes what it checked). `made_again`: the topic was deleted and made again (its offsets
    start at 0 all the same): every record before each partition's first kept one is gone."""
    from stores.kafka import lost_since, spans_from
    from stores.registry import version_store

    # The pointer alone (not the speed layer's marker: a damaged one is a reason to reset): below
    # the lowest cutoff it names every view is answered from batch tables. No batch run yet: all of
    # Kafka counts.
    if pointer is _UNREAD:
        pointer = version_store(settings).pointer()
    floor = min((e.cutoff_ms for e in pointer.entries.values()), default=0) if pointer is not None else 0
    # A declared view no batch run has computed yet (`lambdactl views apply` stopped before its
    # run) is answered from realtime rows alone once the fresh start records it maintained: all of
    # Kafka counts for it.
    unbuilt = unbuilt_views(settings, pointer, declared)
    if unbuilt:
        floor = 0
    spans = spans_from(settings, floor)
    if not spans:  # read as "nothing deleted", a fresh start would serve answers without the topic as exact
        raise NoSuchTopic(
            f"topic {settings.kafka.events_topic} has no partitions (no such topic): check kafka.events_topic "
            "(an environment variable or a lambda.toml here?) and the brokers"
        )
    lost = lost_since(spans, floor, made_again)
    return (floor, lost, unbuilt) if lost else None


class NoSuchTopic(RuntimeError):
    """The events topic the settings name has no partitions."""


def unbuilt_views(settings: Settings, pointer, declared: Registry | None = None) -> list[str]:
    """The storage names of the declared views (their served and pending definitions; loaded unless
    given) that the pointer has no entry for."""
    from definitions.view_loading import load_views
    from stores.view_versions import versions_of

    if declared is None:
        declared = load_views(settings)
    entries = pointer.entries if pointer is not None else {}
    return sorted(set(versions_of(declared, None, pointer).maintained.names()) - set(entries))


def loss_message(lost: tuple[int, list[str], list[str]]) -> str:
    """What unabsorbed_loss found, and what to do first."""
    floor, partitions, unbuilt = lost
    since = (
        f"from {iso_ms(floor)} on"
        if floor
        else f"no batch run yet of {', '.join(unbuilt)}: the whole topic"
        if unbuilt
        else "no batch run yet: the whole topic"
    )
    return (
        f"Kafka no longer holds every record the batch layer has not absorbed yet ({since}): "
        f"{'; '.join(partitions[:3])}. A fresh speed layer recomputes from Kafka's earliest offset, so those "
        "records would be in no layer: run `lambdactl batch` first (its cutoff must pass the first record "
        "Kafka keeps of each such partition)"
    )
