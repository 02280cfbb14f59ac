"""The emulated event bus: events AWS services send, and the pollers and schedules that deliver them.

``s3_notices.py`` (S3's EventBridge events), ``sagemaker_jobs.py`` (SageMaker job state-change events),
``sqs_poller.py`` (Lambda's SQS event-source mappings) and ``scheduler.py`` (scheduled EventBridge rules).
"""
