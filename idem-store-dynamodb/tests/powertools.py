"""Powertools for AWS Lambda (Python)'s idempotency utility on a table idem shares, for
`powertools.rs`.

    python powertools.py ENDPOINT TABLE run '{"order": 1}'   # prints {"result": .., "ran": ..}
    python powertools.py ENDPOINT TABLE key '{"order": 1}'   # prints the record's id
"""

import json
import sys

import boto3
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)

endpoint, table, mode, payload = sys.argv[1:5]
client = boto3.client(
    "dynamodb",
    endpoint_url=endpoint,
    region_name="us-east-1",
    aws_access_key_id="test",
    aws_secret_access_key="test",
)
layer = DynamoDBPersistenceLayer(table_name=table, boto3_client=client)
config = IdempotencyConfig(event_key_jmespath="order")
ran = []


@idempotent_function(
    data_keyword_argument="event", persistence_store=layer, config=config, key_prefix="orders"
)
def handle(event):
    ran.append(True)
    return {"receipt": f"python-{event['order']}"}


event = json.loads(payload)
if mode == "run":
    result = handle(event=event)
    print(json.dumps({"result": result, "ran": bool(ran)}))
elif mode == "key":
    layer.configure(config, key_prefix="orders")
    print(layer._get_hashed_idempotency_key(event))
else:
    sys.exit(f"unknown mode {mode}")
