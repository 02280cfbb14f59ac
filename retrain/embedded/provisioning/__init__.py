"""Provisioning the embedded stack from ``template.yaml`` as ``sam deploy`` and CloudFormation would:
packaging and translating the SAM template, resolving intrinsics, creating what moto's CloudFormation
cannot, and wiring functions, event sources and notifications to the embedded services."""
