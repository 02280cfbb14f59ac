"""The embedded stack's HTTP endpoint: moto's server behind the gatekeeper.

Every signed request (the Lambdas, the CLI, the SageMaker jobs, the state machine's own calls) is routed
to its operation with moto's botocore-driven router and parser, held against the API contract and the
caller's IAM policies (:mod:`retrain.embedded.gatekeeper.gate`), and answered with the service's own
error format when refused, before moto sees it. Unsigned requests (moto's ``/moto-api``) pass as they are.
"""

from __future__ import annotations

import io
import json
import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Final
from urllib.parse import unquote
from xml.sax.saxutils import escape

from werkzeug.serving import make_server

from retrain.embedded.gatekeeper.gate import Gatekeeper, RequestRefusedError

LOG = logging.getLogger(__name__)

# SigV4 signing name -> boto3 service name, where they differ.
SIGNING_NAMES: Final = {
    "states": "stepfunctions",
    "monitoring": "cloudwatch",
    "servicequotas": "service-quotas",
}
_CREDENTIAL: Final = re.compile(r"Credential=(?P<key>[^/&,]+)/[^/]+/(?P<region>[^/]+)/(?P<service>[^/]+)/")
_REASONS: Final = {400: "Bad Request", 403: "Forbidden", 500: "Internal Server Error"}

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WsgiApp = Callable[[Environ, StartResponse], Iterable[bytes]]


def signer(environ: Environ) -> tuple[str, str] | None:
    """(access key id, signing service) of a SigV4-signed request (header or presigned URL)."""
    header = str(environ.get("HTTP_AUTHORIZATION", ""))
    query = unquote(str(environ.get("QUERY_STRING", ""))).replace("X-Amz-Credential=", "Credential=")
    match = _CREDENTIAL.search(header) or _CREDENTIAL.search(query)
    if match is None:
        return None
    return match.group("key"), SIGNING_NAMES.get(match.group("service"), match.group("service"))


def _body(environ: Environ) -> bytes:
    stream = environ["wsgi.input"]
    length = environ.get("CONTENT_LENGTH")
    if length:
        return bytes(stream.read(int(length)))
    if environ.get("wsgi.input_terminated") or "chunked" in str(environ.get("HTTP_TRANSFER_ENCODING", "")):
        return bytes(stream.read())
    return b""


def parse(service: str, environ: Environ) -> tuple[str, str, dict[str, Any]]:
    """(operation name, protocol, parameters) of a request, the way moto routes and parses it."""
    from moto.core.parse import PROTOCOL_PARSERS
    from moto.core.request import Request, determine_request_protocol
    from moto.core.routing import get_service_router
    from moto.core.utils import get_service_model

    request = Request(environ)
    operation, uri_params = get_service_router(service).match(request)
    protocol = determine_request_protocol(get_service_model(service), request.content_type)
    parser = PROTOCOL_PARSERS[protocol](operation, map_type=dict)
    params = parser.parse(
        {
            "method": request.method,
            "values": request.values,
            "headers": request.headers,
            "body": request.get_data(),
            "url_path": request.path,
            "url_params": uri_params,
        }
    )
    return str(operation.name), protocol, dict(params)


def error_response(protocol: str, refused: RequestRefusedError) -> tuple[int, list[tuple[str, str]], bytes]:
    """The refusal in the protocol's error format, so the SDK raises the same ClientError AWS causes."""
    request_id = str(uuid.uuid4())
    headers = [("x-amzn-RequestId", request_id)]
    if protocol in ("json", "rest-json"):
        body = json.dumps({"__type": refused.code, "message": refused.message}).encode()
        headers += [("Content-Type", "application/x-amz-json-1.1"), ("x-amzn-ErrorType", refused.code)]
    elif protocol == "rest-xml":
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{escape(refused.code)}</Code>'
            f"<Message>{escape(refused.message)}</Message><RequestId>{request_id}</RequestId></Error>"
        ).encode()
        headers.append(("Content-Type", "application/xml"))
    else:  # query, ec2
        kind = "Receiver" if refused.status >= 500 else "Sender"
        body = (
            f"<ErrorResponse><Error><Type>{kind}</Type><Code>{escape(refused.code)}</Code>"
            f"<Message>{escape(refused.message)}</Message></Error><RequestId>{request_id}</RequestId>"
            "</ErrorResponse>"
        ).encode()
        headers.append(("Content-Type", "text/xml"))
    headers.append(("Content-Length", str(len(body))))
    return refused.status, headers, body


# Services whose requests moto serves one at a time. DynamoDB applies each item write atomically, its
# condition included (two conditional writes of one item: one succeeds, the other's condition fails);
# moto checks a condition and writes the item in two steps without a lock, so two requests served at
# once could both pass and both write (two tracking deliveries each recorded its own MLflow child).
SERIALIZED_SERVICES: Final = frozenset({"dynamodb"})


class GatedApplication:
    """WSGI middleware: the gatekeeper decides, moto serves what it lets through."""

    def __init__(
        self, app: WsgiApp, gatekeeper: Gatekeeper, before: Callable[[str, str], None] | None = None
    ) -> None:
        self.app = app
        self.gatekeeper = gatekeeper
        self.before = before
        self._serialized = {service: threading.Lock() for service in SERIALIZED_SERVICES}

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        signed = signer(environ)
        if signed is None or str(environ.get("PATH_INFO", "")).startswith("/moto-api"):
            return self.app(environ, start_response)
        key, service = signed
        if service == "sagemaker" and str(environ.get("PATH_INFO", "")).endswith("/invocations"):
            service = "sagemaker-runtime"  # SageMaker Runtime signs as sagemaker; moto routes it so too
        if self.before is not None:
            self.before(key, service)
        body = _body(environ)
        environ["wsgi.input"] = io.BytesIO(body)
        try:
            operation, protocol, params = parse(service, environ)
        except Exception as error:  # moto answers what it cannot route (an unknown operation, a typo)
            LOG.debug("not gated (%s): %s %s", error, environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"))
            operation = ""
        if operation:
            try:
                self.gatekeeper.check(
                    self.gatekeeper.principals.for_access_key(key), service, operation, params
                )
            except RequestRefusedError as refused:
                status, headers, payload = error_response(protocol, refused)
                start_response(f"{status} {_REASONS.get(status, 'Error')}", headers)
                return [b"" if environ.get("REQUEST_METHOD") == "HEAD" else payload]
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        lock = self._serialized.get(service)
        if lock is None:
            return self.app(environ, start_response)
        with lock:
            return list(self.app(environ, start_response))


def gated_moto_server(
    gatekeeper: Gatekeeper,
    *,
    ip_address: str,
    port: int,
    before: Callable[[str, str], None] | None = None,
) -> Any:
    """A started ThreadedMotoServer whose application is gated; `before` (access key, signing service)
    sees every signed request before it is served."""
    from moto import backends
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )

    class Dispatcher(DomainDispatcherApplication):
        """moto's dispatcher with its service modules listed once. moto lists its package directory and
        stats each of its ~170 entries to route every request, under the dispatcher's one lock: a
        quarter of the server's time while 900 uploads were ingested (BENCHMARKS.md)."""

        modules = frozenset(backends.list_of_moto_modules())

        def get_backend_for_host(self, host: str | None) -> Any:
            if host is None or host == "moto_api" or host in self.modules:
                return host
            return next(
                (
                    backend
                    for backend, pattern in self.backend_url_patterns
                    if pattern.match(f"http://{host}")
                ),
                None,
            )

    class GatedMotoServer(ThreadedMotoServer):
        def _server_entry(self) -> None:
            app = GatedApplication(Dispatcher(create_backend_app), gatekeeper, before)
            self._server = make_server(
                self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
            )
            self._server_ready_event.set()
            self._server.serve_forever()

    server = GatedMotoServer(ip_address=ip_address, port=port, verbose=False)
    server.start()
    return server
