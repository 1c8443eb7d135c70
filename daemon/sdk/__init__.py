"""The Python SDK's parts; import them from :mod:`daemon.client`.

``errors`` (typed exceptions), ``retry`` (seed 001's policy), ``protocol``
(the sans-IO client core), ``verbs`` (each verb's request and answer, sans
I/O), ``link`` (a connection's state and reconnect rules, sans I/O),
``paths`` (socket and token resolution), ``job`` (claimed-job handles),
``sync_connection`` and ``trio_connection`` (the two connections),
``sync_client`` and ``trio_client`` (the two clients: the verbs over them)
and ``worker`` (the Trio worker loop).
"""
