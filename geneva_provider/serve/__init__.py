"""A Lance Namespace REST server (``geneva-provider --db URI serve``): :func:`app` over any namespace, :func:`serve`.

FastAPI and uvicorn come with the ``serve`` extra (Airflow's api-server brings them too).
"""

from geneva_provider.serve.app import app
from geneva_provider.serve.server import check_auth, namespace_for, serve

__all__ = ["app", "check_auth", "namespace_for", "serve"]
