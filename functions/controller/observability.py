"""Powertools Logger, Tracer and Metrics shared by the handlers (service name and namespace from env)."""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer

from controller import names

logger = Logger()
tracer = Tracer()
metrics = Metrics(namespace=names.METRICS_NAMESPACE)
