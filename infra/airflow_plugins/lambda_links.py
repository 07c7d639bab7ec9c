"""Airflow plugin: the "Accuracy report" link on the task that built a run's report.

The DAG's report task stores the report's address as its `report_url` XCom; this link shows it on
the task in Airflow's UI (empty, so disabled, on every other task). Loaded by Airflow's API server
from the plugins folder infra/airflow.py configures.
"""

from airflow.plugins_manager import AirflowPlugin
from airflow.serialization.serialized_objects import XComOperatorLink

REPORT_LINK = XComOperatorLink(name="Accuracy report", xcom_key="report_url")


class LambdaLinks(AirflowPlugin):
    name = "lambda_links"
    global_operator_extra_links = [REPORT_LINK]
