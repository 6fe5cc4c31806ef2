# Two real lenient Python HTTP applications behind the proxy in the attack tests: an
# http.server handler (HTTP/1.1 keep-alive, threaded, never reads a request body, slow on /admin)
# and a wsgiref WSGI app (reads l5d-client-id from environ, where l5d_client_id lands too).
# Every request each one serves is printed as a JSON line; the first line gives their ports.
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

lock = threading.Lock()


def record(**fields):
    with lock:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def serve(self):
        ids = [v for k, v in self.headers.items() if k.lower().replace("_", "-") == "l5d-client-id"]
        record(app="http.server", method=self.command, path=self.path, host=self.headers.get("Host"), ids=ids)
        if self.path.startswith("/admin"):
            time.sleep(0.3)
        body = ("served " + self.path).encode("latin-1", "replace")
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_OPTIONS = serve

    def log_message(self, *args):
        pass


def wsgi_app(environ, start_response):
    ids = [environ["HTTP_L5D_CLIENT_ID"]] if "HTTP_L5D_CLIENT_ID" in environ else []
    path = environ.get("PATH_INFO", "")
    record(app="wsgiref", method=environ["REQUEST_METHOD"], path=path, host=environ.get("HTTP_HOST"), ids=ids)
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [("served " + path).encode("latin-1", "replace")]


class QuietWsgiHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


class ThreadingWsgiServer(ThreadingHTTPServer, WSGIServer):
    pass


http_server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
wsgi_server = make_server("127.0.0.1", 0, wsgi_app, server_class=ThreadingWsgiServer, handler_class=QuietWsgiHandler)
for s in (http_server, wsgi_server):
    threading.Thread(target=s.serve_forever, daemon=True).start()
record(ready={"httpServer": http_server.server_address[1], "wsgi": wsgi_server.server_address[1]})
# Ends with the test: its stdin closing.
sys.stdin.read()
