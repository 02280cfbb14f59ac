"""retrain.dev.calls: the AWS calls a handler can make, read from its source (half of the IAM check)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from retrain.dev.calls import Call, Const, Env, ExtractionError, Unknown, handler_calls

REPO = Path(__file__).resolve().parents[3]
FUNCTIONS = REPO / "functions"
TEMPLATE_HANDLERS = re.findall(r"^\s*Handler:\s*(\S+)", (REPO / "template.yaml").read_text(), re.MULTILINE)

NAMES = """
from typing import Final

ENV_ITEMS_TABLE: Final = "ITEMS_TABLE"
ENV_AUDIT_TABLE: Final = "AUDIT_TABLE"
ENV_BUCKET: Final = "BUCKET"
OWNER_INDEX: Final = "by-owner"
"""

CONFIG = """
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from controller import names


@dataclass(frozen=True)
class Config:
    items_table: str
    audit_table: str
    bucket: str = ""


def _required(environ: Mapping[str, str], name: str) -> str:
    return environ[name]


def from_environ(environ: Mapping[str, str]) -> Config:
    return Config(
        items_table=_required(environ, names.ENV_ITEMS_TABLE),
        audit_table=_required(environ, names.ENV_AUDIT_TABLE),
        bucket=environ.get(names.ENV_BUCKET, ""),
    )


def get_config() -> Config:
    return from_environ(os.environ)
"""

STORE = """
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import boto3

from controller import names

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def put(item: Any, *, table_name: str, client: DynamoDBClient) -> None:
    client.put_item(TableName=table_name, Item=item)


def save(item: Any, *, table: str, client: DynamoDBClient) -> None:
    put(item, table_name=table, client=client)


def owned(owner: str, *, table_name: str, client: DynamoDBClient) -> list[Any]:
    paginator = client.get_paginator("query")
    found = []
    try:
        for page in paginator.paginate(TableName=table_name, IndexName=names.OWNER_INDEX):
            found.extend(page["Items"])
    except client.exceptions.ResourceNotFoundException:
        return []
    return found


def _client(client: DynamoDBClient | None) -> DynamoDBClient:
    return client if client is not None else boto3.client("dynamodb")


def count(*, table_name: str, client: DynamoDBClient | None = None) -> int:
    request = {"TableName": table_name, "Select": "COUNT"}
    return int(_client(client).scan(**request)["Count"])
"""


def _package(root: Path, **modules: str) -> Path:
    """A fake `controller` package under root (names.py, config.py, store.py and `modules`)."""
    package = root / "controller"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, source in {"names": NAMES, "config": CONFIG, "store": STORE, **modules}.items():
        (package / f"{name}.py").write_text(textwrap.dedent(source))
    return root


def _find(calls: list[Call], service: str, operation: str, **params: object) -> list[Call]:
    return [
        call
        for call in calls
        if (call.service, call.operation) == (service, operation)
        and all(call.params.get(name) == value for name, value in params.items())
    ]


# --- Rules, on small synthetic packages ----------------------------------------------------------------


def test_a_table_name_binds_through_two_levels_of_calls_to_its_environment_variable(tmp_path):
    # GIVEN a handler passing config.items_table to save(), which passes it on to put()
    root = _package(
        tmp_path,
        app="""
        import boto3
        from controller import store
        from controller.config import get_config

        def handler(event, context):
            config = get_config()
            store.save(event, table=config.items_table, client=boto3.client("dynamodb"))
        """,
    )

    # WHEN the handler's calls are extracted
    calls = handler_calls(root, "controller.app.handler")

    # THEN put()'s PutItem names the table by the variable config.from_environ reads
    assert [(c.service, c.operation, c.params["TableName"]) for c in calls] == [
        ("dynamodb", "PutItem", Env("ITEMS_TABLE"))
    ]
    assert calls[0].chain == ("controller.app.handler", "controller.store.save", "controller.store.put")
    assert calls[0].where == f"{root.as_posix()}/controller/store.py:15"


def test_one_helper_called_from_two_handlers_resolves_per_call_site(tmp_path):
    # GIVEN two handlers calling the same helper with different tables
    root = _package(
        tmp_path,
        app="""
        import boto3
        from controller import store
        from controller.config import get_config

        def handler(event, context):
            store.save(event, table=get_config().items_table, client=boto3.client("dynamodb"))

        def audit_handler(event, context):
            store.save(event, table=get_config().audit_table, client=boto3.client("dynamodb"))
        """,
    )

    # WHEN each handler is extracted
    items = handler_calls(root, "controller.app.handler")
    audit = handler_calls(root, "controller.app.audit_handler")

    # THEN each sees the helper's PutItem on its own table
    assert [c.params["TableName"] for c in items] == [Env("ITEMS_TABLE")]
    assert [c.params["TableName"] for c in audit] == [Env("AUDIT_TABLE")]


def test_a_paginator_held_in_a_variable_is_its_operation_and_client_attributes_are_not_calls(tmp_path):
    # GIVEN a helper that keeps get_paginator("query") in a variable and catches client.exceptions.X
    root = _package(
        tmp_path,
        app="""
        import boto3
        from controller import store
        from controller.config import get_config

        def handler(event, context):
            return store.owned("ann", table_name=get_config().items_table, client=boto3.client("dynamodb"))
        """,
    )

    # WHEN extracted
    calls = handler_calls(root, "controller.app.handler")

    # THEN paginate(...) is one Query with its arguments, a module constant resolved; nothing else
    assert [(c.operation, dict(c.params)) for c in calls] == [
        ("Query", {"TableName": Env("ITEMS_TABLE"), "IndexName": Const("by-owner")})
    ]


def test_a_fallback_client_keeps_its_service_and_a_dict_splat_gives_the_arguments(tmp_path):
    # GIVEN count(), called without a client: it falls back to boto3.client("dynamodb") and passes **request
    root = _package(
        tmp_path,
        app="""
        from controller import store
        from controller.config import get_config

        def handler(event, context):
            return store.count(table_name=get_config().audit_table)
        """,
    )

    # WHEN extracted
    calls = handler_calls(root, "controller.app.handler")

    # THEN the Scan is found with the dict literal's keys as its parameters
    assert [(c.service, c.operation, dict(c.params)) for c in calls] == [
        ("dynamodb", "Scan", {"TableName": Env("AUDIT_TABLE"), "Select": Const("COUNT")})
    ]


def test_a_client_held_by_an_instance_and_a_method_handed_to_a_library_are_followed(tmp_path):
    # GIVEN a class that keeps its config and S3 client, whose method is handed to a library callback
    root = _package(
        tmp_path,
        app="""
        from __future__ import annotations

        from typing import TYPE_CHECKING

        import boto3
        from batchlib import process_each

        from controller.config import Config, get_config

        if TYPE_CHECKING:
            from mypy_boto3_s3 import S3Client

        class Reader:
            def __init__(self, config: Config, s3: S3Client) -> None:
                self.config = config
                self.s3 = s3

            def on_record(self, record):
                return self.fetch(record["key"])

            def fetch(self, key):
                return self.s3.get_object(Bucket=self.config.bucket, Key=key)

        def handler(event, context):
            reader = Reader(get_config(), boto3.client("s3"))
            return process_each(event["Records"], callback=reader.on_record)
        """,
    )

    # WHEN extracted
    calls = handler_calls(root, "controller.app.handler")

    # THEN GetObject is reached through the callback, on the bucket the instance's config names
    assert [(c.service, c.operation, c.params["Bucket"]) for c in calls] == [
        ("s3", "GetObject", Env("BUCKET"))
    ]
    assert calls[0].chain == (
        "controller.app.handler",
        "controller.app.Reader.on_record",
        "controller.app.Reader.fetch",
    )


def test_an_f_string_or_a_value_from_the_event_is_unknown_with_its_source_text(tmp_path):
    # GIVEN a call whose Key is an f-string and whose Bucket comes from the event
    root = _package(
        tmp_path,
        app="""
        import boto3

        def handler(event, context):
            prefix = event["prefix"]
            boto3.client("s3").put_object(Bucket=event["bucket"], Key=f"{prefix}/done", Body=b"")
        """,
    )

    # WHEN extracted
    (call,) = handler_calls(root, "controller.app.handler")

    # THEN both are Unknown, carrying the expression for messages
    assert call.params["Key"] == Unknown("f'{prefix}/done'")
    assert call.params["Bucket"] == Unknown("event['bucket']")


def test_keys_set_on_a_request_dict_count_and_a_name_reassigned_in_a_loop_is_unknown(tmp_path):
    # GIVEN a hand-written pagination loop: request["NextToken"] = token, token reassigned further down
    root = _package(
        tmp_path,
        app="""
        import boto3

        def handler(event, context):
            client = boto3.client("sagemaker")
            request = {"MaxResults": 100}
            token = None
            while True:
                if token:
                    request["NextToken"] = token
                page = client.list_training_jobs(**request)
                token = page.get("NextToken")
                if not token:
                    break
        """,
    )

    # WHEN extracted
    (call,) = handler_calls(root, "controller.app.handler")

    # THEN the call has both keys, and the token is Unknown (not the None it starts as)
    assert dict(call.params) == {"MaxResults": Const("100"), "NextToken": Unknown("token")}


def test_a_value_carried_around_a_loop_that_reads_itself_is_unknown(tmp_path):
    # GIVEN a flag carried around a loop that reads its own last value (as ledger.pending_stats's)
    root = _package(
        tmp_path,
        app="""
        import boto3

        def handler(event, context):
            client = boto3.client("dynamodb")
            full = False
            for partition in event["partitions"]:
                page = client.query(TableName="t", Limit=full or 100)
                full = full or "Last" in page
        """,
    )

    # WHEN extracted (it recursed without end before)
    (call,) = handler_calls(root, "controller.app.handler")

    # THEN the table is known and the limit, which reads the flag, is Unknown
    assert call.params["TableName"] == Const("t") and isinstance(call.params["Limit"], Unknown)


def test_a_handler_whose_module_does_not_exist_is_an_extraction_error(tmp_path):
    # GIVEN a package without a module named `missing`
    root = _package(tmp_path)

    # WHEN its handler is extracted
    # THEN the error names the handler and the files looked for
    with pytest.raises(ExtractionError, match=r"controller\.missing\.handler: no module controller\.missing"):
        handler_calls(root, "controller.missing.handler")


def test_a_handler_function_that_does_not_exist_is_an_extraction_error(tmp_path):
    # GIVEN a module without a function named `nope`
    root = _package(tmp_path, app="def handler(event, context):\n    return None\n")

    # WHEN that function is asked for
    # THEN the error names the module's file and the function
    with pytest.raises(ExtractionError, match=r"controller/app\.py defines no function 'nope'"):
        handler_calls(root, "controller.app.nope")


def test_a_client_of_a_service_botocore_does_not_know_is_an_extraction_error(tmp_path):
    # GIVEN a handler calling a client made for a misspelt service
    root = _package(
        tmp_path,
        app="""
        import boto3

        def handler(event, context):
            boto3.client("dynamo").get_item(TableName="t", Key={})
        """,
    )

    # WHEN extracted
    # THEN the error names the call's place and the service
    with pytest.raises(ExtractionError, match=r"controller/app\.py:5: botocore knows no service 'dynamo'"):
        handler_calls(root, "controller.app.handler")


def test_a_module_that_does_not_parse_is_an_extraction_error(tmp_path):
    # GIVEN a handler module with a syntax error
    root = _package(tmp_path, app="def handler(event, context):\n    return (\n")

    # WHEN extracted
    # THEN the error names the module
    with pytest.raises(ExtractionError, match=r"cannot parse module controller\.app"):
        handler_calls(root, "controller.app.handler")


# --- The real handlers ---------------------------------------------------------------------------------


def test_best_candidate_updates_both_tables_and_reads_the_tuning_job():
    # GIVEN the best_candidate handler
    # WHEN its calls are extracted
    calls = handler_calls(FUNCTIONS, "controller.best_candidate.handler")

    # THEN it writes last_tuning_job to the data set table, and the run through runs.update_run and the
    # trial times through runs.add_job_time
    assert _find(calls, "dynamodb", "UpdateItem", TableName=Env("DATASETS_TABLE"))
    updates = _find(calls, "dynamodb", "UpdateItem", TableName=Env("RUNS_TABLE"))
    assert {u.chain[-1] for u in updates} == {"controller.runs.update_run", "controller.runs.add_job_time"}
    # AND it describes the tuning job, and lists and describes the trials its end events did not count
    assert _find(calls, "sagemaker", "DescribeHyperParameterTuningJob")
    assert _find(calls, "sagemaker", "ListTrainingJobsForHyperParameterTuningJob")
    assert _find(calls, "sagemaker", "DescribeTrainingJob")


def test_finalize_moves_the_watermark_and_starts_the_next_run_without_reading_objects():
    # GIVEN the finalize handler
    # WHEN its calls are extracted
    calls = handler_calls(FUNCTIONS, "controller.finalize.handler")

    # THEN it describes the final job, moves the data set's watermark, and may start an execution
    assert _find(calls, "sagemaker", "DescribeTrainingJob")
    assert _find(calls, "dynamodb", "UpdateItem", TableName=Env("DATASETS_TABLE"))
    assert _find(calls, "stepfunctions", "StartExecution", stateMachineArn=Env("STATE_MACHINE_ARN"))
    # AND it neither reads S3 nor writes a ledger row (its work does not grow with the images)
    assert not [c for c in calls if c.service == "s3"]
    assert not _find(calls, "dynamodb", "UpdateItem", TableName=Env("LEDGER_TABLE"))


def test_ingest_writes_the_ledger_through_the_batch_callback_and_queries_pending_uploads():
    # GIVEN the ingest handler (Ingestor.record_handler is handed to Powertools' batch processor)
    # WHEN its calls are extracted
    calls = handler_calls(FUNCTIONS, "controller.ingest.handler")

    # THEN the ledger row and the claim on its bytes are written from record_handler
    puts = _find(calls, "dynamodb", "PutItem", TableName=Env("LEDGER_TABLE"))
    assert {p.chain[-1] for p in puts} == {"controller.ledger.record", "controller.ledger.claim_content"}
    assert all("controller.ingest.Ingestor.record_handler" in p.chain for p in puts)
    # AND the upload's head and tail are read from the data bucket
    reads = _find(calls, "s3", "GetObject", Bucket=Env("DATA_BUCKET"))
    assert len(reads) == 2 and all(r.chain[-1] == "controller.content._read" for r in reads)
    # AND the data set row is updated, and the pending index paginated (the dispatch after ingest)
    assert _find(calls, "dynamodb", "UpdateItem", TableName=Env("DATASETS_TABLE"))
    assert _find(
        calls, "dynamodb", "Query", TableName=Env("LEDGER_TABLE"), IndexName=Const("pending-by-upload-time")
    )


def test_gate_reads_its_reports_from_a_bucket_known_only_at_run_time():
    # GIVEN the gate handler, which reads s3:// URIs from the state machine's input
    # WHEN its calls are extracted
    calls = handler_calls(FUNCTIONS, "controller.gate.handler")

    # THEN s3io.read_json's GetObject has an Unknown bucket
    reads = [c for c in _find(calls, "s3", "GetObject") if c.chain[-1] == "controller.s3io.read_json"]
    assert reads and all(isinstance(c.params["Bucket"], Unknown) for c in reads)


def test_every_handler_in_the_template_extracts_its_calls_once_each():
    # GIVEN every Handler of template.yaml
    assert len(TEMPLATE_HANDLERS) >= 11

    # WHEN all are extracted
    found = {handler: handler_calls(FUNCTIONS, handler) for handler in TEMPLATE_HANDLERS}

    # THEN each makes some call, each call listed once (how long the extraction takes is a benchmark's
    # question, not a test's)
    for handler, calls in found.items():
        assert calls, handler
        keys = [(c.service, c.operation, frozenset(c.params.items()), c.where) for c in calls]
        assert len(keys) == len(set(keys)), handler
