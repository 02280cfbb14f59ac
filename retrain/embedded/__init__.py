"""The embedded AWS runtime: a moto server on 127.0.0.1 plus what moto lacks (Lambda runtime, Step Functions
integrations, SageMaker jobs, FSx data repository tasks), provisioned from ``template.yaml``."""
