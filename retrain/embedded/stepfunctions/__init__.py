"""What moto's Step Functions (ASL interpreter) lacks, patched into it: the SageMaker and FSx service
integrations, the Lambda invoke path, execution status events and role-signed SDK calls."""
