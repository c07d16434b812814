"""A recording proxy in front of an arm's server: every generation lm-eval asks for also returns its top-k
logprobs, kept per prompt for the logprob axis (``harness.evals.logprobs``).

Why a proxy: lm-eval's ``local-completions`` / ``local-chat-completions`` keep only the text of an answer, and its
response cache only the parsed text, so nothing downstream of lm-eval ever sees a logprob. A second, scoring pass
after the run would double the job and (with ``echo``) never read the prefix cache, so it could not judge a cache
arm. The proxy sees the very requests the arm answers: it adds ``logprobs: k`` (completions) or ``logprobs: true,
top_logprobs: k`` (chat) to each generation request, keeps each choice's logprobs under its prompt, and hands lm-eval
the response with ``logprobs`` back to null, so lm-eval reads exactly what it would have read without the proxy. Any
server kind works (harness, SGLang, vLLM, an external URL); one that refuses the fields (400 naming ``logprobs``) is
asked again without them, once, and from then on never: its items get no logprobs, and the axis says so.

Records are JSON lines ``{"prompt": <prompt or messages>, "logprobs": TokenLogprobs}`` in one file per lm-eval run,
appended as answers come (a resumed run keeps what its first attempt recorded, as lm-eval's response cache does),
joined to lm-eval's samples by the prompt text (:func:`load_records`, :func:`prompt_key`).
"""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from harness.evals.logprobs import TOP_K
from harness.evals.results import TokenLogprobs


def prompt_key(prompt: Any) -> str:
    """One prompt as a join key: a text prompt is itself; chat messages (a list, or lm-eval's JSON text of one) are
    their JSON with sorted keys."""
    if isinstance(prompt, str):
        try:
            parsed = json.loads(prompt)
        except ValueError:
            return prompt
        if not isinstance(parsed, list):
            return prompt
        prompt = parsed
    return json.dumps(prompt, sort_keys=True, ensure_ascii=False)


def load_records(path: Path) -> dict[str, TokenLogprobs]:
    """The recorded logprobs by prompt key (a prompt answered twice: the last answer)."""
    found: dict[str, TokenLogprobs] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                found[prompt_key(record["prompt"])] = TokenLogprobs.from_dict(record["logprobs"])
    return found


class LogprobRecorder:
    """The proxy, listening on loopback while the ``with`` block lasts; ``url`` is what lm-eval is pointed at."""

    def __init__(self, upstream: str, records: Path, top_k: int = TOP_K, *, keep: bool = False) -> None:
        self.upstream = urllib.parse.urlsplit(upstream.rstrip("/"))
        self.records, self.top_k = records, top_k
        self.refused: str | None = None  # why the upstream gives no logprobs, once it has said so
        self.recorded = 0
        self._lock = threading.Lock()
        records.parent.mkdir(parents=True, exist_ok=True)
        if not keep:
            records.unlink(missing_ok=True)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="logprob-proxy", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}{self.upstream.path}"

    def __enter__(self) -> LogprobRecorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- one request ----------------------------------------------------------------------------------------

    def forward(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, str, bytes]:
        conn_cls = http.client.HTTPSConnection if self.upstream.scheme == "https" else http.client.HTTPConnection
        conn = conn_cls(self.upstream.netloc, timeout=24 * 3600)
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            return response.status, response.getheader("Content-Type") or "application/json", response.read()
        finally:
            conn.close()

    def generation(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
        """A completions or chat request: with logprobs added (unless the server refused them), recorded, cleared."""
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        chat = path.endswith("/chat/completions")
        if not self._can_add(request):
            return self.forward("POST", path, body, headers)
        added = dict(request, logprobs=True, top_logprobs=self.top_k) if chat else dict(request, logprobs=self.top_k)
        status, kind, answer = self.forward("POST", path, json.dumps(added).encode(), headers)
        if status == 400 and b"logprobs" in answer:
            self.refused = f"the server refused logprobs: {answer[:200].decode(errors='replace')}"
            return self.forward("POST", path, body, headers)
        if status != 200:
            return status, kind, answer
        try:
            response = json.loads(answer)
            prompts = request["messages"] if chat else request["prompt"]
            prompts = [prompts] if chat or isinstance(prompts, str) else prompts
            lines = []
            for choice in response["choices"]:
                if choice.get("logprobs"):
                    record = TokenLogprobs.from_openai(choice["logprobs"])
                    lines.append(json.dumps({"prompt": prompts[choice["index"]], "logprobs": record.to_dict()}))
                choice["logprobs"] = None  # what lm-eval would have read without the proxy
        except (ValueError, KeyError, IndexError, TypeError):
            return status, kind, answer  # not an answer this proxy understands: handed on untouched
        with self._lock:
            with open(self.records, "a", encoding="utf-8") as f:
                f.writelines(line + "\n" for line in lines)
            self.recorded += len(lines)
        return status, kind, json.dumps(response).encode()

    def _can_add(self, request: Any) -> bool:
        """Only a plain generation: not streamed, not echo (lm-eval's loglikelihood), no logprobs of its own."""
        return (
            self.refused is None
            and isinstance(request, dict)
            and not request.get("stream")
            and not request.get("echo")
            and not request.get("logprobs")
            and not request.get("top_logprobs")
            and ("prompt" in request or "messages" in request)
        )


def _handler(recorder: LogprobRecorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _relay(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {
                k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection")
            }
            try:
                if method == "POST" and self.path.rstrip("/").endswith("completions") and body:
                    status, kind, answer = recorder.generation(self.path, body, headers)
                else:
                    status, kind, answer = recorder.forward(method, self.path, body, headers)
            except OSError as exc:  # the server is gone: lm-eval sees a gateway error, the runner names the server
                status, kind, answer = 502, "text/plain", f"logprob proxy: upstream failed: {exc}".encode()
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            self._relay("POST")

        def do_GET(self) -> None:  # noqa: N802
            self._relay("GET")

        def log_message(self, format: str, *args: Any) -> None:  # quiet: lm-eval's log has the requests
            pass

    return Handler
