"""IAM policy evaluation for the embedded stack: AWS's evaluation logic, run by the maintained
``@cloud-copilot/iam-simulate`` library in a Node sidecar (see ``evaluator.py``)."""
