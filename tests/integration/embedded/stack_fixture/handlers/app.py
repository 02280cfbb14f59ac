"""Handlers of the provisioning fixture: they use only boto3 (from their requirements.txt) and their
environment, as on Lambda."""

import json
import os
import urllib.parse

import boto3

TABLE = os.environ["TABLE"]
STAGE = os.environ["STAGE"]


def ingest(event, context):
    dynamodb = boto3.client("dynamodb")
    sfn = boto3.client("stepfunctions")
    for record in event["Records"]:
        detail = json.loads(record["body"])["detail"]
        key = urllib.parse.unquote_plus(detail["object"]["key"])
        dynamodb.put_item(
            TableName=TABLE,
            Item={
                "key": {"S": key},
                "state": {"S": "ingested"},
                "stage": {"S": STAGE},
                "quiet": {"S": os.environ["QUIET_SECONDS"]},
            },
        )
        sfn.start_execution(
            stateMachineArn=os.environ["STATE_MACHINE_ARN"],
            input=json.dumps({"key": key, "dataset": key.split("/")[1]}),
        )
    return {"batchItemFailures": []}


def mark(event, context):
    boto3.client("dynamodb").update_item(
        TableName=TABLE,
        Key={"key": {"S": event["key"]}},
        UpdateExpression="SET #s = :s, import_task = :t",
        ExpressionAttributeNames={"#s": "state"},
        ExpressionAttributeValues={
            ":s": {"S": "marked"},
            ":t": {"S": event["import"]["DataRepositoryTask"]["TaskId"]},
        },
    )
    return {"marked": event["key"]}


def sweep(event, context):
    boto3.client("dynamodb").put_item(
        TableName=TABLE, Item={"key": {"S": "sweep"}, "state": {"S": event["detail-type"]}}
    )
