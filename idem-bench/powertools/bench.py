"""Powertools for AWS Lambda (Python)'s idempotency utility on Redis, on the same workloads as
idem-bench's `redis-store`: fresh keys, 90% duplicates, only duplicates; calls/s and the Redis
round trips per call (INFO commandstats: every top-level command is one round trip).

    python3 -m venv /tmp/pt && /tmp/pt/bin/pip install "aws-lambda-powertools[redis]"
    /tmp/pt/bin/python idem-bench/powertools/bench.py [--port 6379] [--calls 20000]

One process, one thread: Powertools' idempotent functions are synchronous.
"""

import argparse
import warnings
import time

import redis
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.persistence.redis import RedisCachePersistenceLayer


def round_trips(client):
    stats = client.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k not in ("cmdstat_info",))


def main():
    warnings.filterwarnings("ignore")
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=6379)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    client = redis.Redis(host="127.0.0.1", port=args.port)
    print(f"### Powertools idempotency on Redis ({args.calls} calls per row, one thread)\n")
    print("| workload | calls/s | round trips per call |")
    print("| --- | ---: | ---: |")
    for run, (label, distinct) in enumerate(
        [("fresh keys", args.calls), ("90% duplicates", args.calls // 10), ("only duplicates", 1)]
    ):
        layer = RedisCachePersistenceLayer(client=client)
        config = IdempotencyConfig(event_key_jmespath="key", expires_after_seconds=3600)

        @idempotent_function(data_keyword_argument="job", persistence_store=layer, config=config)
        def handle(job):
            return {"sent": job["key"]}

        prefix = f"pt{run}-{time.time_ns()}"
        if distinct == 1:
            handle(job={"key": f"{prefix}:0"})
        before = round_trips(client)
        started = time.perf_counter()
        for i in range(args.calls):
            handle(job={"key": f"{prefix}:{i % distinct}"})
        elapsed = time.perf_counter() - started
        trips = (round_trips(client) - before) / args.calls
        print(f"| {label} | {args.calls / elapsed:.0f} | {trips:.2f} |")


if __name__ == "__main__":
    main()
