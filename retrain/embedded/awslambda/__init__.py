"""The emulated Lambda service: the template's handlers run as real Python processes, as deployed.

Each function runs on its template ``Runtime`` (python3.13, found on this machine by ``interpreters.py``)
from what ``sam build`` made of its CodeUri and layers (:mod:`retrain.embedded.provisioning.build`), with
nothing else importable. ``runtime.py`` keeps a pool of execution environments per function and invokes
them with Lambda's timeouts and error shapes; ``worker.py`` is one execution environment (the child
process, a standalone bootstrap of the standard library only).
"""
