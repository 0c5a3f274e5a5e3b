"""Powertools for AWS Lambda (Python)'s idempotency utility on DynamoDB, for idem-bench's
`dynamodb-store`, which runs it against the same local server (through its request-counting
proxy) as idem's DynamoDbStore:

    python bench_dynamodb.py ENDPOINT TABLE MODE CALLS PREFIX

MODE `fresh` calls CALLS distinct keys, `duplicates` calls one key (made by MODE `warm`) CALLS
times. Prints one JSON line: the measured loop's wall and CPU seconds. One process, one
thread: Powertools' idempotent functions are synchronous.
"""

import json
import sys
import time
import warnings

import boto3
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)


def main():
    warnings.filterwarnings("ignore")
    endpoint, table, mode, calls, prefix = sys.argv[1:6]
    calls = int(calls)
    client = boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    layer = DynamoDBPersistenceLayer(table_name=table, boto3_client=client)
    config = IdempotencyConfig(event_key_jmespath="key", expires_after_seconds=3600)

    @idempotent_function(data_keyword_argument="job", persistence_store=layer, config=config)
    def handle(job):
        return {"sent": job["key"]}

    if mode == "warm":
        handle(job={"key": f"{prefix}:0"})
        print(json.dumps({"seconds": 0, "cpu_seconds": 0}))
        return
    started, cpu = time.perf_counter(), time.process_time()
    for i in range(calls):
        handle(job={"key": f"{prefix}:{i if mode == 'fresh' else 0}"})
    print(
        json.dumps(
            {
                "seconds": time.perf_counter() - started,
                "cpu_seconds": time.process_time() - cpu,
            }
        )
    )


if __name__ == "__main__":
    main()
