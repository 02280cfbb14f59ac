"""The embedded stack's gate: what AWS checks before it serves a request.

``gate.py`` holds each request against its API's contract (``contracts.py``, botocore's service model
enforced as AWS's front end does) and against the caller's IAM policies (``iam/``: the principals, the
actions a request needs, and AWS's policy evaluation logic run by iam-simulate).
"""
