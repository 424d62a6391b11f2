"""The properties a :class:`GenevaNamespace` is built from (``lance_namespace.connect("geneva", properties)``),
read once into a typed model: the flat ``str -> str`` map the namespace API hands over, grouped by prefix.

``root`` is the database URI (what ``geneva_provider.connect`` takes); ``storage.*`` its storage options;
``inner_impl`` + ``inner.*`` the namespace that does the table and namespace CRUD (default Lance's directory
namespace over ``root``); ``job_runner`` says where jobs run: ``in_process`` (a background thread here), ``spark``
(``spark.remote`` for Spark Connect or ``spark.master``) or ``airflow`` (a DAG run through Airflow's REST API:
``airflow.url``, ``airflow.token`` or ``airflow.username`` + ``airflow.password``, ``airflow.dag_id``,
``airflow.db_conn_id``: the Airflow connection the DAG reads the storage options from).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from geneva_provider.core.errors import InvalidArgumentError

DIRECTORY_IMPL = "dir"
DEFAULT_DAG_ID = "geneva_namespace_jobs"
_PLAIN = ("root", "inner_impl", "job_runner")
_PREFIXES = ("storage.", "inner.", "spark.", "airflow.")


class AirflowRunnerConfig(BaseModel):
    """Where and as whom the namespace triggers its DAG runs (``airflow.*``)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, description="the Airflow API server, e.g. http://127.0.0.1:8080")
    dag_id: str = DEFAULT_DAG_ID
    token: SecretStr | None = None
    username: str | None = None
    password: SecretStr | None = None
    db_conn_id: str | None = Field(None, description="Airflow connection holding the database's storage options")


class NamespaceConfig(BaseModel):
    """The properties of one namespace; secrets are ``SecretStr`` so no repr or log shows them."""

    model_config = ConfigDict(extra="forbid")

    root: str = Field(min_length=1)
    storage: dict[str, SecretStr] = Field(default_factory=dict)
    inner_impl: str = DIRECTORY_IMPL
    inner: dict[str, str] = Field(default_factory=dict)
    job_runner: Literal["in_process", "spark", "airflow"] = "in_process"
    spark: dict[str, str] = Field(default_factory=dict)
    airflow: AirflowRunnerConfig | None = None

    @classmethod
    def of(cls, properties: dict[str, str]) -> NamespaceConfig:
        """The config of the flat properties; InvalidArgumentError naming an unknown or bad property (never its
        value: it may be a secret)."""
        grouped: dict[str, object] = {}
        for key, value in properties.items():
            prefix = next((p for p in _PREFIXES if key.startswith(p)), None)
            if prefix is not None:
                group = grouped.setdefault(prefix[:-1], {})
                assert isinstance(group, dict)
                group[key[len(prefix):]] = value
            elif key in _PLAIN:
                grouped[key] = value
            else:
                raise InvalidArgumentError(f"GenevaNamespace: unknown property {key!r}; the properties are "
                                           f"{list(_PLAIN)} and the prefixes {list(_PREFIXES)}")
        try:
            config = cls.model_validate(grouped)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise InvalidArgumentError(f"GenevaNamespace: bad properties: {problems}") from None
        if config.job_runner == "airflow" and config.airflow is None:
            raise InvalidArgumentError("GenevaNamespace: job_runner 'airflow' needs airflow.url (and airflow.token or "
                                       "airflow.username + airflow.password)")
        return config

    def storage_options(self) -> dict[str, str] | None:
        return {k: v.get_secret_value() for k, v in self.storage.items()} or None

    def inner_properties(self) -> dict[str, str]:
        """The inner namespace's properties: ``inner.*``, with the directory namespace's root and storage options
        defaulting to this namespace's."""
        if self.inner_impl != DIRECTORY_IMPL:
            return dict(self.inner)
        defaults = {"root": self.root, **{f"storage.{k}": v for k, v in (self.storage_options() or {}).items()}}
        return {**defaults, **self.inner}
