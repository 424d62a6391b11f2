"""The lance connection's storage options are masked in what Airflow's REST API returns.

Airflow redacts a connection's extra by key name only, hiding every value below a key whose name
holds a sensitive word.  ``storage_options`` holds none, so e.g. ``azure_storage_account_key``
came back in clear; the hook's ``secret_storage_options`` / ``secret_namespace_properties`` hold
"secret".  These tests run the api-server's own response model in-process; tests/system/test_scheduler.py
checks the same over HTTP against a running api-server.
"""

from __future__ import annotations

import json

import pytest

from geneva_provider.get_provider_info import get_provider_info
from geneva_provider.hooks.lance import LanceHook

OPTIONS = {"azure_storage_account_key": "AZURE-KEY-e81f2a", "aws_access_key_id": "AKIAFAKE0042",
           "aws_region": "us-east-1"}


def api_extra(extra: dict) -> dict:
    """The extra as ``GET /api/v2/connections/{id}`` returns it (the api-server's response model)."""
    from airflow.api_fastapi.core_api.datamodels.connections import ConnectionResponse
    from airflow.models.connection import Connection

    conn = Connection(conn_id="lance_masking", conn_type="lance", host="/lake", extra=json.dumps(extra))
    return json.loads(ConnectionResponse.model_validate(conn).model_dump(by_alias=True)["extra"])


def test_the_api_masks_every_value_of_the_secret_extras():
    got = api_extra({"secret_storage_options": OPTIONS, "namespace_impl": "rest",
                     "secret_namespace_properties": {"uri": "https://catalog", "client_id": "CLIENT-ID-77f0"}})
    assert got == {"secret_storage_options": dict.fromkeys(OPTIONS, "***"), "namespace_impl": "rest",
                   "secret_namespace_properties": {"uri": "***", "client_id": "***"}}


def test_the_api_shows_the_older_extra_names_in_clear():
    """Why the hook warns about ``storage_options``: Airflow masks only the keys that look secret.

    If this starts failing, Airflow masks ``storage_options`` by itself and the warning can go.
    """
    got = api_extra({"storage_options": OPTIONS})["storage_options"]
    assert got["azure_storage_account_key"] == OPTIONS["azure_storage_account_key"]
    assert got["aws_access_key_id"] == "***"  # "access_key" is one of Airflow's sensitive words


def test_the_connection_form_writes_the_masked_extras():
    fields = get_provider_info()["connection-types"][0]["conn-fields"]
    assert set(fields) == {"secret_storage_options", "namespace_impl", "secret_namespace_properties"}


def set_conn(monkeypatch: pytest.MonkeyPatch, conn_id: str, host: str, extra: dict) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "lance", "host": host,
                                                                      "extra": extra}))


def test_the_hook_reads_the_secret_extras_without_a_warning(monkeypatch, tmp_path, capfd):
    set_conn(monkeypatch, "lance_new_names", str(tmp_path), {
        "secret_storage_options": OPTIONS, "secret_namespace_properties": {"dir_listing_enabled": "true"}})
    hook = LanceHook("lance_new_names")
    assert hook.storage_options == OPTIONS
    assert hook.database.catalog._properties == {"dir_listing_enabled": "true"}
    assert hook.test_connection() == (True, f"0 tables in {tmp_path}")
    assert "shown in clear" not in "".join(capfd.readouterr())


def test_the_hook_still_reads_the_older_names_and_says_to_rename_them(monkeypatch, tmp_path, capfd):
    set_conn(monkeypatch, "lance_old_names", str(tmp_path), {
        "storage_options": {"aws_region": "eu-west-1"}, "secret_storage_options": {"aws_secret_access_key": "S3CRET-1"},
        "namespace_properties": {"dir_listing_enabled": "true"}})
    hook = LanceHook("lance_old_names")
    assert hook.storage_options == {"aws_region": "eu-west-1", "aws_secret_access_key": "S3CRET-1"}
    assert hook.database.catalog._properties == {"dir_listing_enabled": "true"}
    out = "".join(capfd.readouterr())
    assert "extra 'storage_options' is shown in clear by the Airflow API" in out
    assert "rename it to 'secret_namespace_properties'" in out
    ok, message = hook.test_connection()
    assert ok and message == (f"0 tables in {tmp_path} (rename extra 'storage_options' to 'secret_storage_options', "
                              "'namespace_properties' to 'secret_namespace_properties': the API and UI show its "
                              "values in clear)")
    assert LanceHook("lance_old_names").storage_options  # a second hook (a trigger's next poll) does not warn again
    assert "shown in clear" not in "".join(capfd.readouterr())


def test_an_option_under_both_names_is_refused_without_its_value(monkeypatch, tmp_path):
    set_conn(monkeypatch, "lance_both_names", str(tmp_path), {
        "storage_options": {"aws_region": "eu-west-1"}, "secret_storage_options": {"aws_region": "OTHER-REGION"}})
    with pytest.raises(ValueError, match=r"\['aws_region'\] set in both extra 'secret_storage_options' and extra "
                                         r"'storage_options'") as refused:
        LanceHook("lance_both_names").get_conn()
    assert "OTHER-REGION" not in str(refused.value) and "eu-west-1" not in str(refused.value)


def test_no_warning_when_the_deployment_masks_the_older_name(monkeypatch, tmp_path, capfd):
    monkeypatch.setenv("AIRFLOW__CORE__SENSITIVE_VAR_CONN_NAMES", "storage_options")
    set_conn(monkeypatch, "lance_configured", str(tmp_path), {"storage_options": {"aws_region": "eu-west-1"}})
    hook = LanceHook("lance_configured")
    assert hook.storage_options == {"aws_region": "eu-west-1"}
    assert hook.test_connection() == (True, f"0 tables in {tmp_path}")
    assert "shown in clear" not in "".join(capfd.readouterr())
