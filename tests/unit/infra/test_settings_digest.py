"""Which settings change restarts which platform process at `up`: the digest of what each reads of
the persisted settings, carried in its supervisord entry and read back from the file written last."""

from __future__ import annotations

import json
from pathlib import Path

from definitions.settings import Settings
from definitions.settings_store import persisted_digest, persisted_path
from infra import services as svc
from infra.supervisor_config import SETTINGS_DIGEST, Program, config_path, entry_digests, render_config


def _persisted(settings: Settings, doc: dict) -> None:
    path = persisted_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    path.chmod(0o600)


def test_the_digest_follows_what_a_process_reads(tmp_path):
    settings = Settings(state_dir=tmp_path / "state")
    assert persisted_digest(settings) == "", "no file yet"
    _persisted(settings, {"api": {"token": "a" * 20}, "views": {"modules": []}, "kafka": {"port": 9092}})
    everything, airflow = persisted_digest(settings), persisted_digest(settings, svc.AIRFLOW.reads)
    _persisted(settings, {"api": {"token": "a" * 20}, "views": {"modules": ["x"]}, "kafka": {"port": 9092}})
    assert persisted_digest(settings) == everything, "views: `views apply` applies them itself"
    _persisted(settings, {"api": {"token": "a" * 20}, "views": {"modules": ["x"]}, "kafka": {"port": 9093}})
    assert persisted_digest(settings) != everything
    assert persisted_digest(settings, svc.AIRFLOW.reads) == airflow, "Airflow is not started with Kafka's port"
    _persisted(settings, {"api": {"token": "b" * 20}, "views": {"modules": ["x"]}, "kafka": {"port": 9093}})
    assert persisted_digest(settings, svc.AIRFLOW.reads) == airflow, "nor with the API's token"
    assert persisted_digest(settings) != everything, "which the API is"
    _persisted(settings, {"api": {"token": "b" * 20, "port": 8001}, "kafka": {"port": 9093}})
    assert persisted_digest(settings, svc.AIRFLOW.reads) != airflow, "its runs link to the API's address"
    moved = persisted_digest(settings, svc.AIRFLOW.reads)
    _persisted(settings, {"api": {"token": "b" * 20, "port": 8001}, "logging": {"level": "DEBUG"}})
    assert persisted_digest(settings, svc.AIRFLOW.reads) != moved, "its processes log as the settings say"


def test_each_entrys_digest_is_read_back_from_the_configuration_written(tmp_path):
    settings = Settings(state_dir=tmp_path / "state")
    programs = [
        Program("api", ["python", "-m", "api.server"], tmp_path, {SETTINGS_DIGEST: "0123abcd"}),
        Program("kafka", ["kafka"], tmp_path, {"JAVA_HOME": "/java"}, store=True),
    ]
    path = config_path(settings.state_dir)
    path.parent.mkdir(parents=True)
    path.write_text(render_config(settings, programs))
    assert entry_digests(settings.state_dir) == {"api": "0123abcd"}
    assert entry_digests(Path(tmp_path / "elsewhere")) == {}


def test_the_streaming_jobs_are_not_restarted_for_the_apis_or_airflows_settings(tmp_path):
    """A new API token or read limit restarted the archiver and the speed layer too: ingestion and
    freshness paused for a setting neither reads."""
    settings = Settings(state_dir=tmp_path / "state")
    base = {"api": {"token": "a" * 20}, "airflow": {"port": 8080}, "kafka": {"port": 9092}, "speed": {}}
    for job in (svc.ARCHIVER, svc.SPEED_LAYER):
        assert not job.reads and set(job.ignores) == {"api", "airflow"}, job.name
        _persisted(settings, base)
        before = persisted_digest(settings, job.reads, job.ignores)
        _persisted(settings, {**base, "api": {"token": "b" * 20, "max_read_mib": 8}, "airflow": {"port": 8081}})
        assert persisted_digest(settings, job.reads, job.ignores) == before, job.name
        for changed in ({"kafka": {"port": 9093}}, {"speed": {"trigger_s": 2}}, {"logging": {"level": "DEBUG"}}):
            _persisted(settings, {**base, **changed})
            assert persisted_digest(settings, job.reads, job.ignores) != before, (job.name, changed)
    assert not svc.API.ignores, "the API restarts for any change but the views"


def test_up_gives_each_entry_the_digest_of_what_it_reads(tmp_path):
    from infra.stack import Stack

    settings = Settings(state_dir=tmp_path / "state")
    stack = Stack(settings)
    starting = {"archiver", "speed-layer", "api", "airflow"}
    _persisted(settings, {"api": {"token": "a" * 20}, "kafka": {"port": 9092}})
    before = stack._settings_digests({}, starting, print)
    _persisted(settings, {"api": {"token": "b" * 20}, "kafka": {"port": 9092}})
    after = stack._settings_digests({}, starting, print)
    assert {n for n in starting if before[n] != after[n]} == {"api"}, (before, after)
