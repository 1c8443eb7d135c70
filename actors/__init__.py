"""The domain of Sluicegate: models, limit math and the actors.

Nothing here does I/O on its own or imports :mod:`daemon`; what an actor needs
from storage is handed to it through the small protocols in
:mod:`actors.ports`.
"""
