"""The Python SDK's parts; import them from :mod:`daemon.client`.

``errors`` (typed exceptions), ``retry`` (seed 001's policy), ``protocol``
(the sans-IO client core), ``paths`` (socket and token resolution), ``job``
(claimed-job handles), ``sync_client`` and ``trio_client`` (the two
connections) and ``worker`` (the Trio worker loop).
"""
