"""moto in server mode on 127.0.0.1 with a free port: real HTTP, so a subprocess (the reference
trainer) and the adapters' boto3 clients reach the same fake S3 and SQS."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

from tests.support.cluster import free_port

REGION = "us-east-1"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing"}


@dataclass(frozen=True)
class MotoServer:
    endpoint: str

    def env(self) -> dict[str, str]:
        """What a subprocess needs to talk to this server through boto3's own configuration."""
        return {**CREDENTIALS, "AWS_DEFAULT_REGION": REGION, "AWS_ENDPOINT_URL": self.endpoint}

    def client(self, service: str) -> Any:
        return boto3.client(
            service,
            region_name=REGION,
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )


@contextmanager
def moto_server() -> Iterator[MotoServer]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield MotoServer(endpoint=f"http://127.0.0.1:{port}")
    finally:
        server.stop()
