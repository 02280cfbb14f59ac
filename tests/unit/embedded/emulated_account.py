"""A gated moto server answering an emulated account's quotas (Service Quotas, Lambda's
GetAccountSettings) and CloudFormation's DescribeType, as the embedded stack serves them."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

from retrain.embedded import cfn_types, servicequotas
from retrain.embedded.account import ACCOUNT_ID
from retrain.embedded.gatekeeper.gate import Gatekeeper
from retrain.embedded.gatekeeper.iam.evaluator import PolicyEvaluator
from retrain.embedded.gatekeeper.iam.principals import Principals
from retrain.embedded.server import gated_moto_server


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def emulated_account(account: servicequotas.AccountQuotas) -> Iterator[str]:
    """The server's endpoint, for as long as the context lasts."""
    with (
        servicequotas.installed(account),
        cfn_types.installed(),
        PolicyEvaluator(account=ACCOUNT_ID) as evaluator,
    ):
        gatekeeper = Gatekeeper(Principals(), evaluator, region="us-east-1", account=ACCOUNT_ID)
        port = _port()
        server = gated_moto_server(gatekeeper, ip_address="127.0.0.1", port=port)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.stop()
