"""User functions: ``@udf`` (a column), ``@chunker`` and ``@udtf`` (a view's rows), on one core (core).

* ``base``        what every user function is: name, version, stateful instances per device, error
                  policy, resources, pickling with its type check, loading, ``outputs() -> pa.Schema``
* ``arrow_types`` the one annotation -> Arrow type mapper (``list[float]``, ``Optional``, row types)
* ``binding``     the one signature binder: which input column each parameter reads
* ``rows``        Python rows as Arrow rows of an output schema, and where they do not fit
* ``identity``    a function's version: a hash of what it computes
* ``udf``, ``udtf`` the decorators and how each kind is called
* ``computed``    ``computed("a * 2 + b")``: a SQL expression as a UDF column kept valid by backfills

``geneva_provider.core.udf`` and ``geneva_provider.core.udtf`` stay as aliases: tables written before this
package existed hold pickles that name those modules.
"""
