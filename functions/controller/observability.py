"""Powertools Logger, Tracer and Metrics shared by the handlers (service name and namespace from env)."""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer

from controller import names

logger = Logger()
# Every call the handlers make goes through botocore; patching only it keeps X-Ray from importing and
# patching whatever else the package holds (patch_all tries 14 libraries, sqlalchemy among them).
tracer = Tracer(patch_modules=("botocore",))
metrics = Metrics(namespace=names.METRICS_NAMESPACE)
