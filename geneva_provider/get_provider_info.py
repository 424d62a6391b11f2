"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    from geneva_provider import __version__

    return {
        "package-name": "airflow-provider-geneva",
        "name": "Geneva (Lance UDF columns on Spark)",
        "description": "Backfill UDF columns and refresh materialized views over Lance tables with Apache Spark.",
        "versions": [__version__],
        "integrations": [{"integration-name": "Geneva", "external-doc-url": "https://lancedb.github.io/lance/",
                          "tags": ["software"]}],
        "hooks": [{"integration-name": "Geneva", "python-modules": ["geneva_provider.hooks.lance"]}],
        "operators": [{"integration-name": "Geneva", "python-modules": ["geneva_provider.operators.backfill",
                                                                       "geneva_provider.operators.indexes",
                                                                       "geneva_provider.operators.maintenance",
                                                                       "geneva_provider.operators.spark",
                                                                       "geneva_provider.operators.views"]}],
        "sensors": [{"integration-name": "Geneva", "python-modules": ["geneva_provider.sensors.table"]}],
        "triggers": [{"integration-name": "Geneva", "python-modules": ["geneva_provider.triggers.table",
                                                                     "geneva_provider.triggers.stage"]}],
        "connection-types": [{
            "hook-class-name": "geneva_provider.hooks.lance.LanceHook",
            "connection-type": "lance",
            "hook-name": "Lance",
            "ui-field-behaviour": {
                "hidden-fields": ["schema", "login", "password", "port"],
                "relabeling": {"host": "Database URI"},
                "placeholders": {"host": "s3://bucket/lake or /data/lake"},
            },
            # The extras holding credentials are named secret_*: Airflow's API and UI mask every value
            # below a key containing "secret" (they redact extras by key name only).
            "conn-fields": {
                "secret_storage_options": {
                    "label": "Storage options",
                    "description": "Object-store options for Lance (credentials, region...), a JSON object; "
                                   "every value is masked in the API and UI",
                    "schema": {"type": ["object", "null"]},
                },
                "namespace_impl": {
                    "label": "Lance namespace",
                    "description": "dir (default), rest, or a lance_namespace implementation's class path",
                    "schema": {"type": ["string", "null"]},
                },
                "secret_namespace_properties": {
                    "label": "Namespace properties",
                    "description": "Properties of the namespace implementation, a JSON object; "
                                   "every value is masked in the API and UI",
                    "schema": {"type": ["object", "null"]},
                },
            },
        }],
        "extra-links": ["geneva_provider.operators.links.GenevaJobLink",
                        "geneva_provider.operators.links.SparkUILink"],
        "plugins": [{"name": "geneva", "plugin-class": "geneva_provider.plugin.GenevaPlugin"}],
    }
