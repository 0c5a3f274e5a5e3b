"""A local DynamoDB-compatible server for idem's tests, examples and benchmarks: moto's, one
request at a time, over keep-alive connections.

    python3 scripts/dynamodb-local.py [PORT]   # prints http://127.0.0.1:PORT once it listens

moto's own `moto_server` answers each request on a thread of its own, and its DynamoDB backend
does not serialise a conditional write's check with its write: two concurrent conditional
PutItems on one key can both succeed there. Here every request runs alone (one lock around the
application), so each is atomic, as DynamoDB's single-item writes are, and a test that races
claims tests the store, not the server. Connections stay open between requests (HTTP/1.1), as
a client's do with DynamoDB (werkzeug's server closes every connection after one request; the
server here is waitress). Without PORT a free one is picked.
"""

import logging
import sys
import threading

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from waitress.server import create_server


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    logging.getLogger("waitress").setLevel(logging.ERROR)
    app = DomainDispatcherApplication(create_backend_app)
    lock = threading.Lock()

    def one_at_a_time(environ, start_response):
        with lock:
            body = app(environ, start_response)
            try:
                return list(body)
            finally:
                if hasattr(body, "close"):
                    body.close()

    # Threads only carry connections; the lock runs one request at a time.
    server = create_server(
        one_at_a_time, host="127.0.0.1", port=port, threads=8, connection_limit=1000
    )
    print(f"http://127.0.0.1:{server.effective_port}", flush=True)
    server.run()


if __name__ == "__main__":
    main()
