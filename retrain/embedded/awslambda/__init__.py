"""The emulated Lambda service: the template's handlers run as real Python processes.

``runtime.py`` keeps a pool of execution environments per function and invokes them with Lambda's
timeouts and error shapes; ``worker.py`` is one execution environment (the child process).
"""
