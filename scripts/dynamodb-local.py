"""A local DynamoDB-compatible server for idem's tests and examples: moto's, served by one thread.

    python3 scripts/dynamodb-local.py [PORT]   # prints http://127.0.0.1:PORT once it listens

moto's own `moto_server` answers each request on a thread of its own, and its DynamoDB backend
does not serialise a conditional write's check with its write: two concurrent conditional
PutItems on one key can both succeed there. Served by one thread, every request is atomic, as
DynamoDB's single-item writes are, so a test that races claims tests the store, not the server.
Without PORT a free one is picked.
"""

import socket
import sys

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    app = DomainDispatcherApplication(create_backend_app)
    server = make_server("127.0.0.1", port, app, threaded=False)
    server.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    print(f"http://127.0.0.1:{server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
