#!/usr/bin/env python3
"""A backend for the live end-to-end suite and the demo (runs in a backend's
network namespace, which holds the VIP on `lo` for direct server return).

- HTTP on [::]:80, IPv4 and IPv6 (HTTP/1.1, keep-alive): `/` answers `backend=<name>`;
  `/health` answers 200, or 503 while the file `<state>/<name>.down` exists,
  so a test can fail the health check without touching established
  connections (SPEC CT-8). The weight header (HC-7) comes from
  `<state>/<name>.weight` when that file exists.
- UDP on <vip>:5000: answers each datagram with `backend=<name> len=<n>`,
  from the VIP (bound to it), straight to the client.
"""

import argparse
import http.server
import os
import socket
import socketserver
import threading


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sluice-e2e-backend"

    def do_GET(self):  # noqa: N802 (http.server's naming)
        name, state = self.server.backend_name, self.server.state_dir
        headers = {}
        if self.path.startswith("/health"):
            # HC-8: the suite checks probes come from the appliance's address.
            peer = self.client_address[0].removeprefix("::ffff:")
            if peer not in self.server.health_peers:
                self.server.health_peers.add(peer)
                with open(os.path.join(state, name + ".health-peers"), "a") as f:
                    f.write(peer + "\n")
            down = os.path.exists(os.path.join(state, name + ".down"))
            code, body = (503, "down\n") if down else (200, "ok\n")
            weight_file = os.path.join(state, name + ".weight")
            if os.path.exists(weight_file):
                with open(weight_file, encoding="ascii") as f:
                    headers["X-Load-Balancing-Endpoint-Weight"] = f.read().strip()
        else:
            code, body = 200, f"backend={name}\n"
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    # Dual stack ([::]:80 also accepts IPv4, as ::ffff:a.b.c.d): the VIP is
    # served over both families.
    address_family = socket.AF_INET6
    daemon_threads = True
    allow_reuse_address = True


def serve_udp(name, vip, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((vip, port))
    while True:
        data, peer = s.recvfrom(65535)
        s.sendto(f"backend={name} len={len(data)}".encode(), peer)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--vip", required=True)
    ap.add_argument("--state", required=True, help="directory of .down/.weight files")
    ap.add_argument("--udp-port", type=int, default=5000)
    a = ap.parse_args()
    threading.Thread(target=serve_udp, args=(a.name, a.vip, a.udp_port), daemon=True).start()
    srv = Server(("::", 80), Handler)
    srv.backend_name, srv.state_dir, srv.health_peers = a.name, a.state, set()
    srv.serve_forever()


if __name__ == "__main__":
    main()
