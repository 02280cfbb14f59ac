"""The embedded AWS runtime: a moto server on 127.0.0.1 plus what moto lacks (Lambda runtime, Step Functions
integrations, SageMaker jobs, FSx data repository tasks), provisioned from ``template.yaml``.

Laid out by service, as moto and LocalStack are: ``awslambda/``, ``sagemaker/``, ``fsx/`` and
``stepfunctions/`` emulate one service and its API each, ``dynamodb/`` adds DynamoDB's item limit to
moto's; ``servicequotas.py`` answers the account's quotas (Service Quotas, Lambda's GetAccountSettings)
and ``cfn_types.py`` CloudFormation's DescribeType, per region; ``events/`` is the event bus (S3
notices, SageMaker job events, the scheduler, SQS pollers); ``provisioning/`` creates ``template.yaml``'s
resources (parameters, external resources, wiring); ``gatekeeper/`` holds requests against API contracts
and IAM; ``stack.py`` starts and stops it all; ``background.py`` runs it for ``retrain local up|down``;
``server.py``, ``snapshot.py``, ``faults.py``, ``account.py`` and ``limits.py`` (AWS's size limits) serve
them all.
"""
