"""Which losses an operator's acceptance covers (stores.kafka_gaps; no services needed)."""

from __future__ import annotations

import pytest

from definitions.settings import Settings
from stores.kafka_gaps import Gap, checkpoint_dirs, covered

M, D = "/lambda/checkpoints/archiver/master", "/lambda/checkpoints/archiver/dlq"


def test_an_acceptance_covers_the_gaps_it_was_given_and_what_retention_deleted_less_of():
    accepted = [Gap(M, 0, 10, 50), Gap(D, 0, 12, 50)]
    assert covered(accepted, accepted)
    assert covered(accepted, [Gap(M, 0, 10, 40)])  # the gap found is within the one accepted
    assert covered(accepted, [])


@pytest.mark.parametrize(
    "found",
    [
        [Gap(M, 0, 10, 51)],  # retention deleted more since: a new acceptance
        [Gap(M, 1, 10, 50)],  # another partition
        [Gap(M, 0, 11, 50)],  # the checkpoint moved: another gap
        [Gap("/lambda/checkpoints/speed", 0, 10, 50)],  # another job's checkpoint
        [Gap(M, 0, 10, 50), Gap(M, 2, 0, 5)],  # one more partition lost
    ],
)
def test_a_loss_no_acceptance_names_is_not_covered(found):
    assert not covered([Gap(M, 0, 10, 50), Gap(D, 0, 12, 50)], found)


def test_each_streaming_job_names_its_checkpoints_and_nothing_else_is_one():
    settings = Settings()
    assert checkpoint_dirs(settings, "archiver") == [
        f"{settings.archiver.checkpoint_dir}/master",
        f"{settings.archiver.checkpoint_dir}/dlq",
    ]
    assert checkpoint_dirs(settings, "speed-layer") == [settings.speed.checkpoint_dir]
    with pytest.raises(ValueError, match="no streaming job 'api'"):
        checkpoint_dirs(settings, "api")
    assert Gap(M, 3, 7, 9).describe() == f"partition 3: offsets 7 to 8 ({M})"
