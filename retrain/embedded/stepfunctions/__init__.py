"""What moto's Step Functions (ASL interpreter) lacks, patched into it: the SageMaker and FSx service
integrations, the Lambda invoke path, execution status events and role-signed SDK calls.

- ``integrations``: ``installed()``, which patches moto in this process and restores it afterwards;
- ``services``: the protocols of the embedded services the patches reach, and those installed now;
- ``task_states``: the ``sagemaker`` and ``aws-sdk`` Task states of moto's ASL interpreter;
- ``calls``: a Task's call of an embedded service (names, the gate, responses as Step Functions JSON);
- ``sync``: ``.sync`` SageMaker jobs, polled with their describe call until they end;
- ``errors``: ``TaskFailed`` and the error names and causes Step Functions reports;
- ``lambda_invoke``: Lambda invokes run by the embedded Lambda runtime instead of Docker;
- ``eventbridge_targets``: EventBridge rules' Lambda targets invoked with their input;
- ``execution_events``: an ended execution as the "Execution Status Change" event;
- ``branch_errors``: a Parallel/Map branch's ``States.*`` error re-raised as such;
- ``data_limit``: the 256 KiB payload limit (``States.DataLimitExceeded``) and the errors ``States.ALL``
  does not catch;
- ``role_signing``: each Task acting, and signing moto's HTTP calls, as its state machine's role.
"""
