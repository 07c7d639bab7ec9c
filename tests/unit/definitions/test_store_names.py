"""Names the platform hands to HBase and to Airflow are checked as settings: a namespace HBase refuses
failed `up` in the bootstrap, after every store had started, with a Thrift error; a DAG id other
than the one the DAG file declares made every trigger a 404."""

from __future__ import annotations

import pytest

from definitions.settings import Settings


@pytest.mark.parametrize(
    ("section", "values", "named"),
    [
        ("hbase", {"namespace": "my space"}, "namespace"),
        ("hbase", {"namespace": "a:b"}, "namespace"),
        ("hbase", {"meta_table": "-meta"}, "meta_table"),
        ("hbase", {"meta_table": "meta/x"}, "meta_table"),
        ("airflow", {"dag_id": "another_dag"}, "dag_id"),
    ],
)
def test_a_name_the_store_would_refuse_is_refused_as_a_setting(section, values, named):
    with pytest.raises(ValueError, match=named):
        Settings(**{section: values})


def test_the_names_the_platform_uses_are_accepted():
    settings = Settings(hbase={"namespace": "lambda_2", "meta_table": "meta.v2-x"})
    assert settings.hbase.namespace == "lambda_2" and settings.airflow.dag_id == "lambda_batch_recompute"
