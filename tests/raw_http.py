"""One HTTP request on a new connection, told apart by how it ended: answered in full, refused before any byte
of an answer (connection refused, or reset with nothing received), or broken (an answer that started and did
not finish). The drain tests need that distinction, which an HTTP client library hides."""
from __future__ import annotations

import json
import socket


def exchange(port: int, method: str, path: str, body: dict | None = None,
             host: str = "127.0.0.1") -> tuple[str, int, bytes]:
    """("answered", status, body), ("refused", 0, b"") or ("broken", 0, what arrived)."""
    payload = json.dumps(body).encode() if body is not None else b""
    head = (f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n").encode()
    received = b""
    try:
        with socket.create_connection((host, port), timeout=30) as s:
            s.sendall(head + payload)
            while chunk := s.recv(65536):
                received += chunk
    except (ConnectionRefusedError, ConnectionResetError, BrokenPipeError):
        return ("refused", 0, b"") if not received else ("broken", 0, received)
    if not received:
        return "refused", 0, b""  # closed before any answer
    header, _, content = received.partition(b"\r\n\r\n")
    lines = header.decode(errors="replace").split("\r\n")
    length = next((int(line.split(":", 1)[1]) for line in lines[1:] if line.lower().startswith("content-length:")),
                  None)
    if not lines[0].startswith("HTTP/1.1 ") or length is None or len(content) != length:
        return "broken", 0, received
    return "answered", int(lines[0].split()[1]), content


def ready_status(port: int) -> tuple[str, int, dict]:
    """GET /ready: (outcome, status, body as JSON or {})."""
    outcome, status, content = exchange(port, "GET", "/ready")
    try:
        return outcome, status, json.loads(content) if content else {}
    except ValueError:
        return outcome, status, {}
