"""What the platform's DAGs share: running `lambdactl` from a task, and naming why a task failed.
Kept out of the DAG processor's scan by `.airflowignore`; importable because Airflow puts the DAGs
folder on the path."""
